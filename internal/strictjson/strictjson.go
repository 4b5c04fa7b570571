// Package strictjson decodes one JSON document strictly and words its errors for the
// person holding the file: the line of a syntax error, and the place ("config.faults",
// "fit.params[2]") of a value of the wrong type or of a field the Go type does not have.
// encoding/json names an unknown key only, which in a file of nested objects leaves the
// reader to search for it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Decode decodes data, one JSON value and nothing after it, into v; strict refuses an
// object key v has no field for. name is the file's name, which every error starts with.
func Decode(name string, data []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return decodeError(name, data, err, v)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%s: line %d: more after the JSON value: the file holds one", name, lineOf(data, dec.InputOffset()))
	}
	return nil
}

// decodeError says where in the file a decoding error is: the line of a syntax error, the
// field of a value of the wrong type, the place of an unknown field.
func decodeError(name string, data []byte, err error, v any) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%s: line %d: %v (not valid JSON)", name, lineOf(data, se.Offset), err)
	case errors.As(err, &te):
		return fmt.Errorf("%s: %s: a JSON %s where %s belongs", name, te.Field, te.Value, jsonKind(te.Type))
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%s: empty: want a JSON value", name)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: cut short: the JSON value does not end", name)
	}
	if where, key, ok := unknownField(data, reflect.TypeOf(v)); ok {
		if where == "" {
			return fmt.Errorf("%s: unknown field %q", name, key)
		}
		return fmt.Errorf("%s: %s: unknown field %q", name, where, key)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// jsonKind names what JSON value a Go type takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// lineOf is the 1-based line of byte offset off in data.
func lineOf(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte("\n"))
}

// unknownField finds the first object key in data that t (a struct, through its fields'
// types) has no field for, as encoding/json matches keys: exactly, else ignoring case. It
// returns the key's place as a path ("config.faults", "fit.params[2]"; "" at the top).
// encoding/json's own error names the key only, which in a file of nested objects leaves
// the reader to search.
func unknownField(data []byte, t reflect.Type) (where, key string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	where, key, ok, _ = walkUnknown(dec, t, "")
	return where, key, ok
}

// walkUnknown reads one JSON value from dec against type t (nil: any value).
func walkUnknown(dec *json.Decoder, t reflect.Type, at string) (string, string, bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", "", false, err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", "", false, err
			}
			k, _ := kt.(string)
			var ft reflect.Type
			if t != nil && t.Kind() == reflect.Struct {
				f, found := jsonField(t, k)
				if !found {
					return at, k, true, nil
				}
				ft = f
			} else if t != nil && t.Kind() == reflect.Map {
				ft = t.Elem()
			}
			if w, k, ok, err := walkUnknown(dec, ft, joinPath(at, k)); ok || err != nil {
				return w, k, ok, err
			}
		}
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if w, k, ok, err := walkUnknown(dec, et, at+"["+strconv.Itoa(i)+"]"); ok || err != nil {
				return w, k, ok, err
			}
		}
	default:
		return "", "", false, nil
	}
	_, err = dec.Token() // the closing delimiter
	return "", "", false, err
}

func joinPath(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// jsonField returns the type of struct t's field that JSON key k decodes into.
func jsonField(t reflect.Type, k string) (reflect.Type, bool) {
	var fold reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == "-" {
			continue
		}
		if n == "" {
			n = f.Name
		}
		if n == k {
			return f.Type, true
		}
		if fold == nil && strings.EqualFold(n, k) {
			fold = f.Type
		}
	}
	return fold, fold != nil
}

// Missing finds the first field of struct type t (through nested structs, pointers and
// slices of them) that the JSON object in data lacks and whose tag does not say
// omitempty; where is its place as Decode's errors give it. A strict reader of a file of
// parameters refuses a missing one: absent decodes as zero, and a parameter silently zero
// is a wrong engine, not a default.
func Missing(data []byte, t reflect.Type) (where, key string, ok bool) {
	return missing(data, t, "")
}

func missing(data json.RawMessage, t reflect.Type, at string) (string, string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return "", "", false // not an object: Decode's to say
		}
		for i := range t.NumField() {
			f := t.Field(i)
			n, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || n == "-" {
				continue
			}
			if n == "" {
				n = f.Name
			}
			raw, found := obj[n]
			for k, v := range obj {
				if !found && strings.EqualFold(k, n) {
					raw, found = v, true
				}
			}
			if !found {
				if slices.Contains(strings.Split(opts, ","), "omitempty") {
					continue
				}
				return at, n, true
			}
			if w, k, ok := missing(raw, f.Type, joinPath(at, n)); ok {
				return w, k, ok
			}
		}
	case reflect.Slice, reflect.Array:
		var arr []json.RawMessage
		if json.Unmarshal(data, &arr) != nil {
			return "", "", false
		}
		for i, e := range arr {
			if w, k, ok := missing(e, t.Elem(), at+"["+strconv.Itoa(i)+"]"); ok {
				return w, k, ok
			}
		}
	}
	return "", "", false
}
