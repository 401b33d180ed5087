package http

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// decodeBody decodes one JSON object into v, rejecting unknown fields,
// invalid UTF-8 (which encoding/json would silently replace) and naming the
// offending field by its JSON path (items[1].quantity) in the error.
func decodeBody(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &orders.Error{Code: codeUnsupportedMedia, Detail: "the body must be application/json",
				Fields: []orders.FieldError{{Field: "Content-Type", Reason: "must be application/json"}}}
		}
	}
	body, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &orders.Error{Code: codeBodyTooLarge, Detail: fmt.Sprintf("the body exceeds %d bytes", tooLarge.Limit)}
	}
	if err != nil {
		return orders.Invalid("body", "could not be read: %v", err)
	}
	if bad := invalidUTF8(body); bad >= 0 {
		return orders.Invalid(valuePath(body, int64(bad)+1, "body"), "must be valid UTF-8 (byte %d is not)", bad)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return orders.Invalid("body", "a JSON object is required")
	case errors.As(err, &typeErr):
		// typeErr.Field has neither array indexes nor the JSON names of
		// embedded structs (Deadline.pay_within): find the path in the body.
		return orders.Invalid(valuePath(body, typeErr.Offset, "body"), "must be a JSON %s, got %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return orders.Invalid(field, "is not a known field")
	default:
		return orders.Invalid("body", "malformed JSON: %v", err)
	}
}

// jsonKind names a Go kind as JSON does: integers are integers, not int64.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "integer (64-bit)"
	case kind == "slice" || kind == "array":
		return "array"
	case kind == "struct" || kind == "map":
		return "object"
	case kind == "bool":
		return "boolean"
	}
	return kind
}

// invalidUTF8 returns the offset of the first byte of body that is not
// valid UTF-8, or -1.
func invalidUTF8(body []byte) int {
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// valuePath returns the JSON path (pay_within, items[1].quantity) of the
// first value of body that ends at or after byte offset end (the Offset of a
// json.UnmarshalTypeError), or def when there is none (malformed JSON).
func valuePath(body []byte, end int64, def string) string {
	type frame struct {
		array bool
		index int
		key   string
		inKey bool // an object expecting a key or its end
	}
	var stack []frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.array {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		}
		return cmp.Or(b.String(), def)
	}
	// done moves the enclosing container past the value just read.
	done := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				stack[n-1].inKey = true
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return def
		}
		d, isDelim := tok.(json.Delim)
		if n := len(stack); n > 0 && !stack[n-1].array && stack[n-1].inKey {
			if isDelim { // '}'
				stack = stack[:n-1]
				done()
				continue
			}
			stack[n-1].key, stack[n-1].inKey = fmt.Sprint(tok), false
			continue
		}
		if isDelim && d == ']' {
			stack = stack[:len(stack)-1]
			done()
			continue
		}
		if dec.InputOffset() >= end {
			return path()
		}
		switch {
		case isDelim && d == '[':
			stack = append(stack, frame{array: true})
		case isDelim && d == '{':
			stack = append(stack, frame{inKey: true})
		default:
			done()
		}
	}
}
