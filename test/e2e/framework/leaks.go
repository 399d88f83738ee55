package framework

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
)

// leakWindow is how many characters of an encoded secret make a leak: long enough that
// random text never matches (12 bytes of base64 text), short enough to catch a secret split
// across the lines of a hex dump (client-go dumps binary bodies 16 bytes a line).
const leakWindow = 16

// spacedWindow is the window of the spaced hex forms: the 8 bytes of half a hex dump line
// ("xx xx xx xx xx xx xx xx"). 16 characters (5 bytes) of them matched unrelated base64
// text in a hex dump.
const spacedWindow = 23

// FindLeaks searches files for the secrets (name: value) in every form a log could hold
// them: raw, hex (lower and upper case, plain and spaced as hex dumps write it) and
// base64 (standard and URL alphabets, with and without padding, at any alignment inside a
// longer encoded text), whole or in part: any leakWindow characters of a form count. It
// returns one line per leak, naming the file, the secret and the form, never the value.
// Values should be random and at least 32 characters, so that every window is unique.
func FindLeaks(files []string, secrets map[string]string) ([]string, error) {
	type origin struct{ secret, form string }
	windows := map[int]map[string]origin{leakWindow: {}, spacedWindow: {}}
	for name, value := range secrets {
		for form, enc := range leakForms(value) {
			w := leakWindow
			if strings.HasPrefix(form, "spaced") {
				w = spacedWindow
			}
			for i := 0; i+w <= len(enc); i++ {
				windows[w][enc[i:i+w]] = origin{name, form}
			}
		}
	}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return out, err
		}
		seen := map[origin]bool{}
		for w, set := range windows {
			for i := 0; i+w <= len(data); i++ {
				if o, ok := set[string(data[i:i+w])]; ok && !seen[o] {
					seen[o] = true
					out = append(out, fmt.Sprintf("%s: secret %s as %s at byte %d", f, o.secret, o.form, i))
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func leakForms(v string) map[string]string {
	forms := map[string]string{
		"raw":             v,
		"hex":             hex.EncodeToString([]byte(v)),
		"HEX":             strings.ToUpper(hex.EncodeToString([]byte(v))),
		"spaced hex":      spacedHex(v),
		"spaced HEX":      strings.ToUpper(spacedHex(v)),
		"base64 (std)":    "",
		"base64 (URL)":    "",
		"base64 (std) +1": "",
		"base64 (URL) +1": "",
		"base64 (std) +2": "",
		"base64 (URL) +2": "",
	}
	// Inside a longer text, the value starts at some offset modulo 3: one of the three
	// shifts lines up with the encoder's groups. The last 4 characters depend on what
	// follows (or on padding), so they are left out; "with and without padding" are then
	// the same form.
	for shift := range 3 {
		if shift >= len(v) {
			break
		}
		suffix := ""
		if shift > 0 {
			suffix = fmt.Sprintf(" +%d", shift)
		}
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "URL": base64.URLEncoding} {
			s := enc.EncodeToString([]byte(v[shift:]))
			forms["base64 ("+name+")"+suffix] = s[:max(0, len(s)-4)]
		}
	}
	return forms
}

func spacedHex(v string) string {
	parts := make([]string, len(v))
	for i := range len(v) {
		parts[i] = hex.EncodeToString([]byte{v[i]})
	}
	return strings.Join(parts, " ")
}
