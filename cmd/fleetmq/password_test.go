package main

// The test of "fleetmq account set-password": an owner who lost the portal
// password gets a new one from the operator, and every browser signed in
// with the old one is signed out.

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq/web/portal"
)

// browser is an HTTP client with its own cookies, signing in to the portal
// the way its sign-in form does.
type browser struct {
	base string
	hc   *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{base: base, hc: &http.Client{Jar: jar, Timeout: waitFor,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get requests a portal page and returns the status and the redirect's
// target, if any.
func (b *browser) get(t *testing.T, path string) (int, string) {
	t.Helper()
	r, err := b.hc.Get(b.base + path)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode, r.Header.Get("Location")
}

// signIn sends the sign-in form and returns its status: 303 signed in,
// 401 refused.
func (b *browser) signIn(t *testing.T, email, password string) int {
	t.Helper()
	b.get(t, "/signin") // the form's CSRF cookie
	u, _ := url.Parse(b.base)
	token := ""
	for _, c := range b.hc.Jar.Cookies(u) {
		if c.Name == portal.SigninCookie {
			token = c.Value
		}
	}
	if token == "" {
		t.Fatal("the sign-in page set no CSRF cookie")
	}
	r, err := b.hc.PostForm(b.base+"/signin", url.Values{"email": {email}, "password": {password}, portal.CSRFField: {token}})
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}

// fleetmqProcess runs the fleetmq command args in a child process (this
// test binary, see TestMain) with stdin, as an operator's shell does, and
// returns its stdout, stderr and exit code.
func fleetmqProcess(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestAccountSetPassword: the operator sets a new owner password, from
// standard input or generated; the old one no longer signs in, the new one
// does, the account's signed-in browsers are signed out and another
// account's are not; an unknown account, a short password and an empty
// standard input are errors with a non-zero exit status.
func TestAccountSetPassword(t *testing.T) {
	dir := t.TempDir()
	A := createAccount(t, dir, "Acme", "owner@acme.example", "-plan", "starter")
	B := createAccount(t, dir, "Beta", "owner@beta.example")
	_, httpAddr, _, _ := serve(t, dir)
	base := "http://" + httpAddr

	signedIn := newBrowser(t, base)
	if code := signedIn.signIn(t, "owner@acme.example", A.Password); code != http.StatusSeeOther {
		t.Fatalf("sign-in with the first password: %d", code)
	}
	if code, _ := signedIn.get(t, "/overview"); code != http.StatusOK {
		t.Fatalf("/overview signed in: %d", code)
	}
	other := newBrowser(t, base)
	if code := other.signIn(t, "owner@beta.example", B.Password); code != http.StatusSeeOther {
		t.Fatalf("B's sign-in: %d", code)
	}

	// From standard input, piped to a real process.
	const chosen = "correct horse battery staple"
	out, errOut, code := fleetmqProcess(t, chosen+"\n", "account", "set-password", "-data", dir, A.ID, "-stdin")
	if want := "portal password of owner@acme.example (account " + A.ID + ") set. 1 portal session signed out.\n"; code != 0 || out != want {
		t.Fatalf("set-password -stdin: exit %d, %q (stderr %q)\nwant %q", code, out, errOut, want)
	}
	if code, to := signedIn.get(t, "/overview"); code != http.StatusSeeOther || !strings.HasPrefix(to, "/signin") {
		t.Fatalf("/overview with the session from before: %d to %q, want signed out (303 to /signin)", code, to)
	}
	fresh := newBrowser(t, base)
	if code := fresh.signIn(t, "owner@acme.example", A.Password); code != http.StatusUnauthorized {
		t.Fatalf("sign-in with the old password: %d, want 401", code)
	}
	if code := fresh.signIn(t, "owner@acme.example", chosen); code != http.StatusSeeOther {
		t.Fatalf("sign-in with the new password: %d, want 303", code)
	}
	if code, _ := other.get(t, "/overview"); code != http.StatusOK {
		t.Fatalf("B's session after A's password change: %d, want still signed in", code)
	}

	// Generated, shown once.
	out = mustCLI(t, dir, "account", "set-password", A.ID)
	generated := field(t, out, "portal password")
	if len(generated) < 20 || generated == chosen || !strings.Contains(out, "1 portal session signed out.") {
		t.Fatalf("set-password without -stdin:\n%s", out)
	}
	if code, _ := fresh.get(t, "/overview"); code != http.StatusSeeOther {
		t.Fatalf("/overview after the second change: %d, want signed out", code)
	}
	if code := newBrowser(t, base).signIn(t, "owner@acme.example", chosen); code != http.StatusUnauthorized {
		t.Fatalf("sign-in with the replaced password: %d, want 401", code)
	}
	if code := newBrowser(t, base).signIn(t, "owner@acme.example", generated); code != http.StatusSeeOther {
		t.Fatalf("sign-in with the generated password: %d, want 303", code)
	}

	// Errors: said on stderr, exit status 1, nothing changed.
	const missing = "00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		stdin, want string
		args        []string
	}{
		{"", `fleetmq: account "` + missing + `" not found`, []string{missing}},
		{"long enough password\n", `fleetmq: account "` + missing + `" not found`, []string{missing, "-stdin"}},
		{"short\n", "at least 10 characters", []string{A.ID, "-stdin"}},
		{"", "-stdin: no password on standard input", []string{A.ID, "-stdin"}},
		{"", "want 1 argument(s), got 0", nil},
	} {
		_, errOut, code := fleetmqProcess(t, tc.stdin, append([]string{"account", "set-password", "-data", dir}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("set-password %s with %q on stdin: exit %d, stderr %q; want a failure saying %q", tc.args, tc.stdin, code, errOut, tc.want)
		}
	}
	if code := newBrowser(t, base).signIn(t, "owner@acme.example", generated); code != http.StatusSeeOther {
		t.Fatalf("a failed set-password changed the password: sign-in %d", code)
	}
}
