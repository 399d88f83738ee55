// Package state persists the driver's own records: what the controller created and what the
// node staged and published. Each record set lives in one JSON document that is replaced
// atomically, so a process killed at any instant leaves either the old or the new document.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File is one JSON document on disk, written with the classic atomic-replace sequence:
// write a temp file, fsync it, rename it over the old one, fsync the directory. The rename
// makes the switch atomic for readers and for kill -9; the two fsyncs make it survive a
// power loss too.
type File struct {
	path string
}

// NewFile returns the document at path. Nothing is read or written yet.
func NewFile(path string) *File { return &File{path: path} }

// Path is the document's location.
func (f *File) Path() string { return f.path }

// Load decodes the document into v. A missing document leaves v untouched and reports
// found=false: a first start is not an error. A document that exists but cannot be read
// or decoded reports found=true with the error, so that no caller takes it for missing.
func (f *File) Load(v any) (found bool, err error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("decode %s: %w", f.path, err)
	}
	return true, nil
}

// Save replaces the document with v.
func (f *File) Save(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return f.Write(data)
}

// Create writes v only if no document exists yet, atomically: of two processes creating
// the same document, exactly one wins, and created tells the caller which.
func (f *File) Create(v any) (created bool, err error) {
	data, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	return f.write(data, os.Link)
}

// Write replaces the document with data, an encoded document.
func (f *File) Write(data []byte) error {
	_, err := f.write(data, os.Rename)
	return err
}

// write puts data in a synced temp file and moves it into place with place: a rename
// replaces the document, a link creates it only if it is missing.
func (f *File) write(data []byte, place func(oldpath, newpath string) error) (placed bool, err error) {
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.path)+".tmp-*")
	if err != nil {
		return false, err
	}
	// After a rename the temp name is gone; after a link it is a second name to remove.
	defer os.Remove(tmp.Name()) //nolint:errcheck
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if err := place(tmp.Name(), f.path); errors.Is(err, os.ErrExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, syncDir(dir)
}

// RemoveTemps deletes temp files left by a Save that was killed before its rename.
func (f *File) RemoveTemps() error {
	matches, err := filepath.Glob(filepath.Join(filepath.Dir(f.path), "."+filepath.Base(f.path)+".tmp-*"))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
