// Package publicapi holds the tests that guard the library's public surface (pkg/...):
// every package has a package doc, and no exported function, method, field or interface
// names an internal/ type or an unexported one, which a user of the library could not
// write or pass (TestPublicAPI); the exported API is the one checked in as pkg/api.txt, and
// every exported declaration has a doc comment (TestAPI). docs/library.md says what is
// public. After a deliberate change of the API, regenerate pkg/api.txt:
//
//	go test ./internal/testing/publicapi -run TestAPI -update
package publicapi
