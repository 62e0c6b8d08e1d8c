package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/problem"
)

// bodyField is the name a validation error gives the request body as a whole.
const bodyField = "body"

// Limits of the list endpoint's page size.
const (
	DefaultLimit = 50
	MaxLimit     = 100
)

// member is one name/value pair of a JSON object, in the order sent.
type member struct {
	name  string
	value json.RawMessage
}

// decodeObject parses body as exactly one JSON object. It refuses invalid
// JSON, anything but an object, a name given twice (encoding/json would keep
// the last silently) and trailing data.
func decodeObject(body []byte) ([]member, *ValidationError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, invalid(bodyField, "a JSON object is required")
	}
	if !utf8.Valid(body) {
		return nil, invalid(bodyField, "is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, invalid(bodyField, "is not valid JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, invalid(bodyField, "must be a JSON object")
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid(bodyField, "is not valid JSON")
		}
		name, _ := tok.(string) // object keys are always strings
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, invalid(bodyField, "is not valid JSON")
		}
		if seen[name] {
			return nil, invalid(name, "is given more than once")
		}
		seen[name] = true
		members = append(members, member{name: name, value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, invalid(bodyField, "is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid(bodyField, "must hold a single JSON object")
	}
	return members, nil
}

// fieldErrors collects the problems of several fields.
type fieldErrors []problem.FieldError

func (f *fieldErrors) add(field, detail string) {
	*f = append(*f, problem.FieldError{Field: field, Detail: detail})
}

func (f fieldErrors) err() error {
	if len(f) == 0 {
		return nil
	}
	return &ValidationError{Fields: f}
}

func isNull(v json.RawMessage) bool { return string(v) == "null" }

// stringValue decodes v as a JSON string; ok is false for any other type.
func stringValue(v json.RawMessage) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// checkText says what is wrong with a text value, or "" when it is fine.
// PostgreSQL text cannot hold U+0000, so it is refused here rather than
// failing in the database.
func checkText(s string, maxLen int) string {
	switch {
	case strings.ContainsRune(s, 0):
		return "must not contain the NUL character"
	case utf8.RuneCountInString(s) > maxLen:
		return "must be at most " + strconv.Itoa(maxLen) + " characters"
	}
	return ""
}

func parseTitle(v json.RawMessage) (string, string) {
	s, ok := stringValue(v)
	if !ok {
		return "", "must be a string"
	}
	if strings.TrimSpace(s) == "" {
		return "", "must not be empty or blank"
	}
	if d := checkText(s, MaxTitleLength); d != "" {
		return "", d
	}
	return s, ""
}

func parseDescription(v json.RawMessage) (string, string) {
	s, ok := stringValue(v)
	if !ok {
		return "", "must be a string or null"
	}
	if d := checkText(s, MaxDescriptionLength); d != "" {
		return "", d
	}
	return s, ""
}

func parseStatus(v json.RawMessage) (Status, string) {
	s, ok := stringValue(v)
	if !ok || !Status(s).Valid() {
		return "", `must be one of "todo", "in_progress", "done"`
	}
	return Status(s), ""
}

func parseDueDate(v json.RawMessage) (Date, string) {
	s, ok := stringValue(v)
	if !ok {
		return Date{}, "must be a date string (YYYY-MM-DD) or null"
	}
	d, err := ParseDate(s)
	if err != nil {
		return Date{}, "must be a valid date in the form YYYY-MM-DD"
	}
	return d, ""
}

// ParseNewTask validates a create body: an object with a required title and
// optional description, status and due_date, and nothing else. Every invalid
// field is named in the returned *ValidationError.
func ParseNewTask(body []byte) (NewTask, error) {
	members, verr := decodeObject(body)
	if verr != nil {
		return NewTask{}, verr
	}
	in := NewTask{Status: StatusTodo}
	var errs fieldErrors
	hasTitle := false
	for _, m := range members {
		var detail string
		switch m.name {
		case "title":
			hasTitle = true
			if isNull(m.value) {
				detail = "is required and must be a string"
				break
			}
			in.Title, detail = parseTitle(m.value)
		case "description":
			if isNull(m.value) {
				break
			}
			var s string
			if s, detail = parseDescription(m.value); detail == "" {
				in.Description = &s
			}
		case "status":
			in.Status, detail = parseStatus(m.value)
		case "due_date":
			if isNull(m.value) {
				break
			}
			var d Date
			if d, detail = parseDueDate(m.value); detail == "" {
				in.DueDate = &d
			}
		default:
			detail = "is not a known field"
		}
		if detail != "" {
			errs.add(m.name, detail)
		}
	}
	if !hasTitle {
		errs.add("title", "is required")
	}
	if err := errs.err(); err != nil {
		return NewTask{}, err
	}
	return in, nil
}

// ParsePatch validates an update body: an object with any of title,
// description, status and due_date. description and due_date may be null,
// which clears them; title and status may not. An empty object changes
// nothing.
func ParsePatch(body []byte) (Patch, error) {
	members, verr := decodeObject(body)
	if verr != nil {
		return Patch{}, verr
	}
	var p Patch
	var errs fieldErrors
	for _, m := range members {
		var detail string
		switch m.name {
		case "title":
			if isNull(m.value) {
				detail = "cannot be null"
				break
			}
			var s string
			if s, detail = parseTitle(m.value); detail == "" {
				p.Title = &s
			}
		case "description":
			if isNull(m.value) {
				p.ClearDescription = true
				break
			}
			var s string
			if s, detail = parseDescription(m.value); detail == "" {
				p.Description = &s
			}
		case "status":
			if isNull(m.value) {
				detail = "cannot be null"
				break
			}
			var s Status
			if s, detail = parseStatus(m.value); detail == "" {
				p.Status = &s
			}
		case "due_date":
			if isNull(m.value) {
				p.ClearDueDate = true
				break
			}
			var d Date
			if d, detail = parseDueDate(m.value); detail == "" {
				p.DueDate = &d
			}
		default:
			detail = "is not a known field"
		}
		if detail != "" {
			errs.add(m.name, detail)
		}
	}
	if err := errs.err(); err != nil {
		return Patch{}, err
	}
	return p, nil
}

// ParseLimit validates the list endpoint's limit parameter: absent means
// DefaultLimit; otherwise a whole number from 1 to MaxLimit.
func ParseLimit(s string, present bool) (int, error) {
	if !present {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit || strconv.Itoa(n) != s {
		return 0, invalid("limit", "must be a whole number from 1 to %d", MaxLimit)
	}
	return n, nil
}

// ParseID parses a task id. Only the canonical lower- or upper-case form
// (8-4-4-4-12 hex digits) is accepted; ok is false for anything else, which
// the API answers as an unknown task (404).
func ParseID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	return id.String(), true
}
