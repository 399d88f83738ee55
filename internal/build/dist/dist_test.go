package dist

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestArchiveLayoutAndReproducible: the archive holds its top directory with the files
// under it, modes as given, root-owned and at the epoch; written again an hour later from
// files with other times, it is byte-identical; SHA256SUMS checks with sha256sum -c.
func TestArchiveLayoutAndReproducible(t *testing.T) {
	src := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	files := []File{
		{Name: "kubevol-cluster", Src: write("cp", "control plane"), Mode: 0o755},
		{Name: "kubevol", Src: write("kv", "kubevol"), Mode: 0o755},
		{Name: "LICENSE", Src: write("lic", "license"), Mode: 0o644},
	}
	top := Name("v1.2.3", "linux", "arm64")
	if top != "kubevol-v1.2.3-linux-arm64" {
		t.Fatalf("Name = %q", top)
	}
	dir := t.TempDir()
	out, err := WriteArchive(dir, top, files)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	for _, f := range files {
		if err := os.Chtimes(f.Src, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := WriteArchive(dir, top, files); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(out)
	if !bytes.Equal(first, second) {
		t.Error("the same files gave another archive")
	}

	zr, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: uid %d gid %d time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		got = append(got, h.Name+" "+os.FileMode(h.Mode).String()+" "+string(body))
	}
	want := []string{
		top + "/ -rwxr-xr-x ",
		top + "/LICENSE -rw-r--r-- license",
		top + "/kubevol -rwxr-xr-x kubevol",
		top + "/kubevol-cluster -rwxr-xr-x control plane",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("archive:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	sums, err := WriteSums(dir, []string{filepath.Base(out)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(sums, "  "+top+".tar.gz\n") {
		t.Errorf("SHA256SUMS = %q", sums)
	}
	if sha, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command(sha, "-c", SumsFile)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c: %v\n%s", err, b)
		}
	}
}
