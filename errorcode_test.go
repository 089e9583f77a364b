package fleetmq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// codeConstants returns the root package's Code* constants: name to value.
func codeConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: %s is not a string literal", fset.Position(name.Pos()), name.Name)
						continue
					}
					consts[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return consts
}

// TestErrorCodesRegistered: ErrorCodes registers exactly the Code*
// constants, each once, with an error status and a meaning.
func TestErrorCodesRegistered(t *testing.T) {
	consts := codeConstants(t)
	if len(consts) == 0 {
		t.Fatal("no Code* constants found")
	}
	declared := map[string]bool{}
	for name, v := range consts {
		declared[v] = true
		if fleetmq.HTTPStatus(v) == 0 {
			t.Errorf("%s (%q) is not registered in ErrorCodes", name, v)
		}
	}
	seen := map[string]bool{}
	for _, c := range fleetmq.ErrorCodes {
		if seen[c.Code] {
			t.Errorf("%q is registered twice", c.Code)
		}
		seen[c.Code] = true
		if !declared[c.Code] {
			t.Errorf("%q is registered but has no Code* constant", c.Code)
		}
		if c.Status < 400 || c.Status > 599 || c.Meaning == "" {
			t.Errorf("%q: status %d (want 4xx or 5xx), meaning %q", c.Code, c.Status, c.Meaning)
		}
		if got := fleetmq.HTTPStatus(c.Code); got != c.Status {
			t.Errorf("HTTPStatus(%q) = %d, want %d", c.Code, got, c.Status)
		}
	}
	if got := fleetmq.HTTPStatus("no_such_code"); got != 0 {
		t.Errorf("HTTPStatus of an unregistered code = %d, want 0", got)
	}
}

// TestErrorCodesUsedAreRegistered reads the module's Go source (tests
// aside) and fails on an error code that is written where a code goes but
// is not a registered constant: a string literal (or a Code* constant
// ErrorCodes lacks) as the Code of a composite literal, as the code
// argument of newProblem (web/api), or assigned to a Code field. What
// the REST API answers at run time is checked by the web/api tests, whose
// every problem must carry a registered code with its status.
func TestErrorCodesUsedAreRegistered(t *testing.T) {
	consts := codeConstants(t)
	fset := token.NewFileSet()
	// check reports e if it is a code that is not a registered constant.
	check := func(e ast.Expr, where string) {
		var name string
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				t.Errorf("%s: %s is a bare string %s: use a constant registered in fleetmq.ErrorCodes", fset.Position(e.Pos()), where, e.Value)
			}
			return
		case *ast.Ident:
			name = e.Name
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "fleetmq" {
				name = e.Sel.Name
			}
		}
		if strings.HasPrefix(name, "Code") {
			if v, ok := consts[name]; !ok || fleetmq.HTTPStatus(v) == 0 {
				t.Errorf("%s: %s is %s, which is not registered in fleetmq.ErrorCodes", fset.Position(e.Pos()), where, name)
			}
		}
	}
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Code" {
							check(kv.Value, "the Code of a composite literal")
						}
					}
				}
			case *ast.CallExpr:
				if f, ok := n.Fun.(*ast.Ident); ok && f.Name == "newProblem" && len(n.Args) > 1 {
					check(n.Args[1], "newProblem's code")
				}
			case *ast.AssignStmt:
				if len(n.Lhs) != len(n.Rhs) {
					break
				}
				for i, l := range n.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Code" {
						check(n.Rhs[i], "a value assigned to a Code field")
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read only %d Go files: not the module's root?", files)
	}
}
