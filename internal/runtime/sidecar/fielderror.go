package sidecar

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// FieldError is a configuration error about fields of a library's options struct. Its
// message names the fields in braces, "{RetryIntervalMax}", so that a front end can name
// them as the user knows them (a flag, a YAML key); Error shows the bare field names.
type FieldError struct {
	// Field is the field at fault, as a Go path ("LeaderElection.LeaseDuration").
	Field string
	// Template is the message, with every field name it mentions in braces.
	Template string
}

// Invalid returns a *FieldError about field; format is formatted first, so field names in
// braces are written into it literally.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Template: fmt.Sprintf(format, args...)}
}

var fieldRef = regexp.MustCompile(`\{([A-Za-z][A-Za-z0-9.]*)\}`)

func (e *FieldError) Error() string { return e.Rename(nil) }

// Rename returns the message with each field named by names (and the bare field name for
// the others).
func (e *FieldError) Rename(names map[string]string) string {
	return fieldRef.ReplaceAllStringFunc(e.Template, func(ref string) string {
		field := strings.Trim(ref, "{}")
		if n, ok := names[field]; ok {
			return n
		}
		return field
	})
}

// RenameFields rewrites err's message with names when it is, or wraps, a *FieldError.
func RenameFields(err error, names map[string]string) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return errors.New(strings.Replace(err.Error(), fe.Error(), fe.Rename(names), 1))
}
