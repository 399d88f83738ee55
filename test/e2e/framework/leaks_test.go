package framework

import (
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The leak finder finds a secret in each form it names, and nothing in text without it.
func TestFindLeaks(t *testing.T) {
	const secret = "Zq3vX9kLm2Pw8RtY4uJc7NbH5sGd1FeA"
	dump := hex.Dump([]byte("k8s\x00\x0a\x0c" + secret + "\x12\x00"))
	for name, text := range map[string]string{
		"raw":            "password=" + secret + "\n",
		"truncated":      `"data":{"k":"` + secret[:20] + " [truncated 99 chars]",
		"base64 padded":  base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64 url raw": base64.RawURLEncoding.EncodeToString([]byte(secret)),
		"base64 inside":  base64.StdEncoding.EncodeToString([]byte(`{"token":"` + secret + `"}`)),
		"hex":            hex.EncodeToString([]byte(secret)),
		"HEX":            strings.ToUpper(hex.EncodeToString([]byte(secret))),
		"hex dump":       dump,
	} {
		f := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(f, []byte("noise "+text+" noise"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := FindLeaks([]string{f}, map[string]string{"s": secret})
		if err != nil || len(got) == 0 {
			t.Errorf("%s: no leak found (%v) in %q", name, err, text)
		}
		for _, l := range got {
			if strings.Contains(l, secret) {
				t.Errorf("the report shows the secret: %s", l)
			}
		}
	}
	f := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(f, []byte(strings.Repeat("eyJhbGciOiJSUzI1NiJ9 0123456789abcdef ", 100)+secret[:15]), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := FindLeaks([]string{f}, map[string]string{"s": secret}); len(got) > 0 {
		t.Errorf("leaks found in clean text: %v", got)
	}
}
