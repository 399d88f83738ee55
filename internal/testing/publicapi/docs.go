package publicapi

import (
	"go/ast"
	"go/token"
)

// Undocumented returns the position and name of every exported declaration of the files
// without a doc comment: funcs, methods of exported types, types, consts and vars (a group's
// comment documents its members; so does a comment on the same line), the methods of
// exported interfaces of more than one method and, if fields is set, the exported fields of exported structs (see
// undocumentedFields for what a comment covers).
func Undocumented(fset *token.FileSet, files []*ast.File, fields bool) []string {
	var out []string
	miss := func(pos token.Pos, name string) {
		out = append(out, fset.Position(pos).String()+": "+name)
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv == nil {
					miss(d.Pos(), d.Name.Name)
				} else if recv := receiverName(d.Recv.List[0].Type); ast.IsExported(recv) {
					miss(d.Pos(), recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Doc == nil && d.Doc == nil {
							miss(s.Pos(), s.Name.Name)
						}
						switch t := s.Type.(type) {
						case *ast.InterfaceType:
							if len(t.Methods.List) == 1 {
								continue // the type's comment says what its one method does
							}
							for _, n := range undocumentedFields(fset, t.Methods) {
								miss(n.Pos(), s.Name.Name+"."+n.Name)
							}
						case *ast.StructType:
							if fields {
								for _, n := range undocumentedFields(fset, t.Fields) {
									miss(n.Pos(), s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
								miss(n.Pos(), n.Name)
							}
						}
					}
				}
			}
		}
	}
	return out
}

// undocumentedFields returns the exported names of the list (interface methods or struct
// fields) without a comment. A comment also documents the entries on the lines right
// below it, up to a blank line: "GetConfigMap and GetSecret answer from the cache" covers both.
func undocumentedFields(fset *token.FileSet, list *ast.FieldList) []*ast.Ident {
	var out []*ast.Ident
	documented, lastLine := false, -1
	for _, f := range list.List {
		line := fset.Position(f.Pos()).Line
		switch {
		case f.Doc != nil || f.Comment != nil:
			documented = true
		case line != lastLine+1:
			documented = false
		}
		lastLine = fset.Position(f.End()).Line
		if documented {
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				out = append(out, n)
			}
		}
	}
	return out
}

// receiverName is the name of a method's receiver type: T in (T), (*T), (T[P]).
func receiverName(x ast.Expr) string {
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
