package topic

import (
	"errors"
	"strings"
	"testing"
)

var long = strings.Repeat("a", MaxLen+1) // one byte over the limit

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"sport/tennis/player1", true},
		{"/", true},
		{"a//b", true},
		{"$SYS/broker/uptime", true},
		{"$share/g/a", true}, // a legal name; only filters are parsed as shared
		{"ünïcode/名前", true},
		{" ", true},
		{strings.Repeat("a", MaxLen), true},
		{"", false},
		{long, false},
		{"a/+", false},
		{"+", false},
		{"#", false},
		{"a/#", false},
		{"a+b", false},
		{"a#", false},
		{"a\x00b", false},
		{"a/\xff", false},
		{"\xed\xa0\x80", false}, // UTF-16 surrogate encoded in UTF-8
	}
	for _, tt := range tests {
		err := ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%.40q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%.40q) = %v, does not wrap ErrInvalidName", tt.name, err)
		}
	}
}

func TestValidateFilter(t *testing.T) {
	tests := []struct {
		filter string
		want   error // nil when valid
	}{
		{"a", nil},
		{"#", nil},
		{"+", nil},
		{"/", nil},
		{"/#", nil},
		{"+/+", nil},
		{"a//b", nil},
		{"sport/tennis/player1/#", nil},
		{"sport/+/player1", nil},
		{"sport/+", nil},
		{"+/tennis/#", nil},
		{"$SYS/#", nil},
		{"$SYS/+/uptime", nil},
		{"$share/g/a/b", nil},
		{"$share/g/#", nil},
		{"$share/g/+/x", nil},
		{"$share/g//", nil},
		{"$share", nil},       // not shared: no "$share/" prefix
		{"$shared/g/a", nil},  // not shared either
		{"$SHARE/g/a", nil},   // the prefix is case-sensitive
		{"a/$share/g/b", nil}, // only a leading $share is special
		{strings.Repeat("a", MaxLen), nil},
		{"", ErrInvalidFilter},
		{long, ErrInvalidFilter},
		{"a/#/b", ErrInvalidFilter},
		{"#/a", ErrInvalidFilter},
		{"a#", ErrInvalidFilter},
		{"a/b#", ErrInvalidFilter},
		{"a+", ErrInvalidFilter},
		{"+a", ErrInvalidFilter},
		{"a/+b/c", ErrInvalidFilter},
		{"++", ErrInvalidFilter},
		{"##", ErrInvalidFilter},
		{"a\x00", ErrInvalidFilter},
		{"a/\xc3", ErrInvalidFilter},
		{"$share/g", ErrInvalidShare},
		{"$share/g/", ErrInvalidShare},
		{"$share/", ErrInvalidShare},
		{"$share//a", ErrInvalidShare},
		{"$share/g+/a", ErrInvalidShare},
		{"$share/+/a", ErrInvalidShare},
		{"$share/#/a", ErrInvalidShare},
		{"$share/g/a/#/b", ErrInvalidShare},
		{"$share/g/a\x00", ErrInvalidShare},
		{"$share/\xff/a", ErrInvalidShare},
		{"$share/g/" + long, ErrInvalidShare},
	}
	for _, tt := range tests {
		err := ValidateFilter(tt.filter)
		if tt.want == nil {
			if err != nil {
				t.Errorf("ValidateFilter(%.40q) = %v, want nil", tt.filter, err)
			}
			continue
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("ValidateFilter(%.40q) = %v, want %v", tt.filter, err, tt.want)
		}
	}
}

func TestParseShare(t *testing.T) {
	tests := []struct {
		filter string
		group  string
		inner  string
		shared bool
		want   error
	}{
		{"a/b", "", "a/b", false, nil},
		{"#", "", "#", false, nil},
		{"$share", "", "$share", false, nil},
		{"$share/g/a/b", "g", "a/b", true, nil},
		{"$share/consumers/sport/+/player1", "consumers", "sport/+/player1", true, nil},
		{"$share/g/#", "g", "#", true, nil},
		{"$share/g//", "g", "/", true, nil},
		{"$share/g/$SYS/#", "g", "$SYS/#", true, nil},
		{"$share/g", "", "", true, ErrInvalidShare},
		{"$share/g/", "", "", true, ErrInvalidShare},
		{"$share//a", "", "", true, ErrInvalidShare},
		{"$share/g+/a", "", "", true, ErrInvalidShare},
		{"$share/a#/a", "", "", true, ErrInvalidShare},
		{"$share/g/a+", "", "", true, ErrInvalidFilter}, // wraps both sentinels
		{"a/#/b", "", "a/#/b", false, ErrInvalidFilter},
	}
	for _, tt := range tests {
		group, inner, shared, err := ParseShare(tt.filter)
		if group != tt.group || inner != tt.inner || shared != tt.shared {
			t.Errorf("ParseShare(%q) = %q, %q, %v; want %q, %q, %v",
				tt.filter, group, inner, shared, tt.group, tt.inner, tt.shared)
		}
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("ParseShare(%q) error = %v, want %v", tt.filter, err, tt.want)
		}
	}
}

func TestParseShareInnerErrorWrapsBoth(t *testing.T) {
	_, _, _, err := ParseShare("$share/g/a/#/b")
	if !errors.Is(err, ErrInvalidShare) || !errors.Is(err, ErrInvalidFilter) {
		t.Fatalf("error %v should wrap ErrInvalidShare and ErrInvalidFilter", err)
	}
}
