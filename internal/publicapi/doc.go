// Package publicapi holds the test that guards the library's public surface (pkg/...):
// every package has a package doc, and no exported function, method, field or interface
// names an internal/ type or an unexported one, which a user of the library could not
// write or pass. docs/library.md says what is public.
package publicapi
