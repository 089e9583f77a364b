package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// The -print form of a create command writes only the fields a script
// asks for, space-separated on one line, in the order asked:
//
//	read -r ID PASSWORD < <(fleetmq credential create "$ACC" -kind publisher -print id,password)
//
// The fields are checked before anything is made, so a misspelt one
// creates nothing.

// printList parses a -print value against the fields a command has; ""
// gives nil (the full output).
func printList(only string, fields []string) ([]string, error) {
	if only == "" {
		return nil, nil
	}
	list := strings.Split(only, ",")
	for i, f := range list {
		list[i] = strings.TrimSpace(f)
		if !slices.Contains(fields, list[i]) {
			return nil, fmt.Errorf("-print: unknown field %q (one of %s)", list[i], strings.Join(fields, ","))
		}
	}
	return list, nil
}

// printFields writes the values of list from values on one line.
func printFields(out io.Writer, list []string, values map[string]string) error {
	line := make([]string, len(list))
	for i, f := range list {
		line[i] = values[f]
	}
	_, err := fmt.Fprintln(out, strings.Join(line, " "))
	return err
}

// The fields -print can name, in the order the full output shows them.
var (
	accountFields    = []string{"account_id", "owner", "plan", "password"}
	credentialFields = []string{"id", "kind", "username", "password"}
)
