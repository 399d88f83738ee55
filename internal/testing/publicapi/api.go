package publicapi

import (
	"fmt"
	"go/types"
	"slices"
	"strings"
)

// Module is the import path of the module whose pkg/ packages are described.
const Module = "github.com/kubevol/kubevol"

// Describe returns one line per exported declaration of pkg, in the shape of Go's own api/
// files ("pkg/volume: func IsTransient(error) bool"), sorted: every exported const, var,
// func and type, every exported field of an exported struct type, every method of an exported
// interface type, and every exported method in the method set of *T for an exported type T.
// The parameter names of funcs and methods are left out, so renaming one is not an API
// change (those of a func-typed field or parameter are not: go/types prints them). Types of
// other packages are written with their full import path, standard library packages by name.
func Describe(pkg *types.Package) []string {
	rel := strings.TrimPrefix(pkg.Path(), Module+"/")
	q := qualifier(pkg)
	var lines []string
	add := func(format string, args ...any) {
		lines = append(lines, rel+": "+fmt.Sprintf(format, args...))
	}
	sc := pkg.Scope()
	for _, name := range sc.Names() {
		obj := sc.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			if b, ok := o.Type().(*types.Basic); ok && b.Info()&types.IsUntyped != 0 {
				add("const %s = %s", name, o.Val().ExactString())
			} else {
				add("const %s %s = %s", name, types.TypeString(o.Type(), q), o.Val().ExactString())
			}
		case *types.Var:
			add("var %s %s", name, types.TypeString(o.Type(), q))
		case *types.Func:
			add("func %s%s", name, signature(o.Type().(*types.Signature), q))
		case *types.TypeName:
			for _, l := range describeType(o, q) {
				add("%s", l)
			}
		}
	}
	slices.Sort(lines)
	return lines
}

func describeType(o *types.TypeName, q types.Qualifier) []string {
	name := o.Name()
	if o.IsAlias() {
		return []string{fmt.Sprintf("type %s = %s", name, types.TypeString(types.Unalias(o.Type()), q))}
	}
	named := o.Type().(*types.Named)
	if tp := named.TypeParams(); tp.Len() > 0 {
		var ps []string
		for i := 0; i < tp.Len(); i++ {
			ps = append(ps, tp.At(i).Obj().Name()+" "+types.TypeString(tp.At(i).Constraint(), q))
		}
		name += "[" + strings.Join(ps, ", ") + "]"
	}
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		lines = append(lines, "type "+name+" struct")
		for i := 0; i < u.NumFields(); i++ {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			if f.Embedded() {
				lines = append(lines, fmt.Sprintf("type %s struct, embedded %s", name, types.TypeString(f.Type(), q)))
			} else {
				lines = append(lines, fmt.Sprintf("type %s struct, %s %s", name, f.Name(), types.TypeString(f.Type(), q)))
			}
		}
	case *types.Interface:
		var names []string
		for i := 0; i < u.NumMethods(); i++ {
			m := u.Method(i)
			if !m.Exported() {
				names = append(names, "unexported methods")
				continue
			}
			names = append(names, m.Name())
			lines = append(lines, fmt.Sprintf("type %s interface, %s%s", name, m.Name(), signature(m.Type().(*types.Signature), q)))
		}
		names = slices.Compact(names)
		lines = append(lines, fmt.Sprintf("type %s interface { %s }", name, strings.Join(names, ", ")))
		return lines
	default:
		lines = append(lines, fmt.Sprintf("type %s %s", name, types.TypeString(u, q)))
	}
	value := types.NewMethodSet(o.Type())
	ptr := types.NewMethodSet(types.NewPointer(o.Type()))
	for i := 0; i < ptr.Len(); i++ {
		m := ptr.At(i).Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		recv := "*" + name
		if value.Lookup(m.Pkg(), m.Name()) != nil {
			recv = name
		}
		lines = append(lines, fmt.Sprintf("method (%s) %s%s", recv, m.Name(), signature(m.Type().(*types.Signature), q)))
	}
	return lines
}

// signature writes a function's parameters and results without their names.
func signature(sig *types.Signature, q types.Qualifier) string {
	tuple := func(t *types.Tuple, variadic bool) []string {
		var s []string
		for i := 0; i < t.Len(); i++ {
			typ := t.At(i).Type()
			if variadic && i == t.Len()-1 {
				s = append(s, "..."+types.TypeString(typ.(*types.Slice).Elem(), q))
			} else {
				s = append(s, types.TypeString(typ, q))
			}
		}
		return s
	}
	out := "(" + strings.Join(tuple(sig.Params(), sig.Variadic()), ", ") + ")"
	switch res := tuple(sig.Results(), false); len(res) {
	case 0:
	case 1:
		out += " " + res[0]
	default:
		out += " (" + strings.Join(res, ", ") + ")"
	}
	return out
}

// qualifier writes pkg's own types unqualified, standard library types by package name and
// every other type with its full import path, which is never ambiguous (k8s.io/api has many
// packages named v1).
func qualifier(pkg *types.Package) types.Qualifier {
	return func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		if first, _, _ := strings.Cut(p.Path(), "/"); !strings.Contains(first, ".") {
			return p.Name()
		}
		return p.Path()
	}
}
