package publicapi

import (
	"go/ast"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/packages"
)

// loaded is ./pkg/... with its types and syntax, loaded once for every test of the package:
// type-checking all of pkg/ is most of their time.
var loaded = sync.OnceValues(func() ([]*packages.Package, error) {
	return packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax,
		Dir:  filepath.Join("..", "..", ".."),
	}, "./pkg/...")
})

func loadPkg(t *testing.T) []*packages.Package {
	t.Helper()
	pkgs, err := loaded()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestPublicAPI loads pkg/... with its types and checks every exported signature.
func TestPublicAPI(t *testing.T) {
	pkgs := loadPkg(t)
	if len(pkgs) < 10 {
		t.Fatalf("loaded only %d packages under pkg/", len(pkgs))
	}
	bad := func(where string, typ types.Type) {
		s := types.TypeString(typ, nil)
		if strings.Contains(s, "/internal/") {
			t.Errorf("%s: internal type %s", where, s)
		}
		var walk func(types.Type)
		walk = func(x types.Type) {
			switch v := x.(type) {
			case *types.Named:
				if !v.Obj().Exported() && v.Obj().Pkg() != nil {
					t.Errorf("%s: unexported type %s", where, s)
				}
			case *types.Pointer:
				walk(v.Elem())
			case *types.Slice:
				walk(v.Elem())
			case *types.Map:
				walk(v.Key())
				walk(v.Elem())
			}
		}
		walk(typ)
	}
	checkSig := func(where string, sig *types.Signature) {
		for i := 0; i < sig.Params().Len(); i++ {
			bad(where+" param", sig.Params().At(i).Type())
		}
		for i := 0; i < sig.Results().Len(); i++ {
			bad(where+" result", sig.Results().At(i).Type())
		}
	}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.PkgPath, e)
		}
		if strings.Contains(p.PkgPath, "/internal/") {
			continue
		}
		if !slices.ContainsFunc(p.Syntax, func(f *ast.File) bool { return f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package "+p.Name+" ") }) {
			t.Errorf("%s has no package doc", p.PkgPath)
		}
		sc := p.Types.Scope()
		for _, n := range sc.Names() {
			o := sc.Lookup(n)
			if !o.Exported() {
				continue
			}
			where := p.PkgPath + "." + n
			switch o := o.(type) {
			case *types.Func:
				checkSig(where, o.Type().(*types.Signature))
			case *types.TypeName:
				if st, ok := o.Type().Underlying().(*types.Struct); ok {
					for i := 0; i < st.NumFields(); i++ {
						if st.Field(i).Exported() {
							bad(where+"."+st.Field(i).Name(), st.Field(i).Type())
						}
					}
				}
				if it, ok := o.Type().Underlying().(*types.Interface); ok {
					for i := 0; i < it.NumMethods(); i++ {
						checkSig(where+"."+it.Method(i).Name(), it.Method(i).Type().(*types.Signature))
					}
				}
				ms := types.NewMethodSet(types.NewPointer(o.Type()))
				for i := 0; i < ms.Len(); i++ {
					m := ms.At(i).Obj()
					if m.Exported() {
						checkSig(where+"."+m.Name(), m.Type().(*types.Signature))
					}
				}
			case *types.Var:
				bad(where, o.Type())
			}
		}
	}
}
