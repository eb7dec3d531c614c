package credentialprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
)

// Why a response or request was refused is decided by the kubelet's
// decoders (codec.go); what is said about it is written here, from what
// holds no credential: JSON offsets, and the API's own field names. The
// decoders' messages are never passed on: they quote values
// (metav1.Duration quotes the bad cacheDuration) and field paths, and a
// path holds the plugin's map keys and whatever unknown names it wrote.

// subject is what is decoded: its name in messages, its top-level fields,
// the one of them that is a map (whose keys are the plugin's or the
// service account's, never named) and a new value of its v1 type (a
// superset of every version's fields) to probe a type error with.
type subject struct {
	name   string
	kind   string
	fields []string
	mapped string
	probe  func() any
}

var (
	subjectResponse = subject{
		name:   "response",
		kind:   responseKind,
		fields: []string{"apiVersion", "kind", "cacheKeyType", "cacheDuration", "auth"},
		mapped: "auth",
		probe:  func() any { return &credentialproviderv1.CredentialProviderResponse{} },
	}
	subjectRequest = subject{
		name:   "request",
		kind:   requestKind,
		fields: []string{"apiVersion", "kind", "image", "serviceAccountToken", "serviceAccountAnnotations"},
		mapped: "serviceAccountAnnotations",
		probe:  func() any { return &credentialproviderv1.CredentialProviderRequest{} },
	}
)

// maxStrictProblems bounds how many strict-decoding problems a message
// lists.
const maxStrictProblems = 5

// describeTypeMeta says why apimachinery's meta factory could not read
// data's apiVersion and kind, reading them again with encoding/json (as
// the factory does) to learn where: the factory's own error quotes the
// data.
func describeTypeMeta(s subject, data []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	err := json.Unmarshal(data, &tm)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at offset %d", syn.Offset)
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Errorf("%s is not a JSON object (at offset %d)", s.name, typ.Offset)
	case errors.As(err, &typ):
		return fmt.Errorf("%s field %s has the wrong JSON type (at offset %d)", s.name, s.fieldName(typ.Field), typ.Offset)
	case err != nil:
		return fmt.Errorf("%s cannot be decoded", s.name)
	}
	// JSON that reads: the factory refused the apiVersion.
	return fmt.Errorf("%s apiVersion is not a group/version", s.name)
}

// describeDecodeError describes an error of the strict codec.
func describeDecodeError(s subject, data []byte, err error) error {
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		return fmt.Errorf("%s has an unknown, duplicated or miscased field: %s", s.name, s.describeStrict(strict.Errors()))
	}
	switch {
	case runtime.IsMissingKind(err):
		return fmt.Errorf("%s has no kind", s.name)
	case runtime.IsMissingVersion(err):
		return fmt.Errorf("%s has no apiVersion", s.name)
	case runtime.IsNotRegisteredError(err):
		return fmt.Errorf("%s kind is not %s", s.name, s.kind)
	}
	// The codec stopped at a value. Its error type is internal to
	// sigs.k8s.io/json, so encoding/json, which decodes the same types
	// alike, says where.
	var typ *json.UnmarshalTypeError
	perr := json.Unmarshal(data, s.probe())
	switch {
	case errors.As(perr, &typ):
		return fmt.Errorf("%s field %s has the wrong JSON type (at offset %d)", s.name, s.fieldName(typ.Field), typ.Offset)
	case perr != nil && s.name == subjectResponse.name:
		// The only other failure of these types: metav1.Duration's.
		return errors.New("response cacheDuration is not a duration")
	}
	return fmt.Errorf("%s cannot be decoded", s.name)
}

// describeStrict lists the unknown and duplicated fields, naming a field
// only when it is one of the API's (or one of them in another case).
func (s subject) describeStrict(errs []error) string {
	var out []string
	seen := map[string]bool{}
	for _, e := range errs {
		path := ""
		if fe, ok := e.(interface{ FieldPath() string }); ok {
			path = fe.FieldPath()
		}
		dup := strings.HasPrefix(e.Error(), "duplicate field")
		var p string
		switch name, known := s.known(path); {
		case known && name != path:
			p = name + " miscased"
		case known && dup:
			p = "duplicated " + name
		case known:
			// Unknown yet named as the API names it: cannot happen;
			// say no more than the rest.
			p = "an unknown field"
		case strings.HasPrefix(path, s.mapped+".") && dup:
			p = "one duplicated in " + s.mapped
		case strings.HasPrefix(path, s.mapped+"."):
			p = "an unknown or miscased one in " + s.mapped
		case dup:
			p = "a duplicated field"
		default:
			p = "an unknown field"
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) > maxStrictProblems {
		out = append(out[:maxStrictProblems], fmt.Sprintf("and %d more", len(out)-maxStrictProblems))
	}
	if len(out) == 0 {
		return "a field"
	}
	return strings.Join(out, ", ")
}

// known returns the API's spelling of a top-level field path that names
// one of s's fields in any case.
func (s subject) known(path string) (string, bool) {
	for _, f := range s.fields {
		if strings.EqualFold(f, path) {
			return f, true
		}
	}
	return "", false
}

// fieldName names the top-level field of an encoding/json error path,
// which is the API's own name when the path starts with one: the rest
// may hold map keys.
func (s subject) fieldName(path string) string {
	top, _, _ := strings.Cut(path, ".")
	if name, ok := s.known(top); ok {
		return name
	}
	return "(unnamed)"
}
