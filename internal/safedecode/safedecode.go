// Package safedecode holds the errors pullguard gives for a Kubernetes-style
// document that could not be decoded, built without quoting the document.
// apimachinery's errors can print a whole object (a Secret without kind is
// reported with its JSON, password included) and YAML and JSON errors quote
// the bytes they stopped at; manifests and configuration files hold
// credentials, so their errors are built here from what is safe: field
// paths, line numbers, offsets and type names.
//
// pkg/podworkers (manifests) and pkg/credentialprovider (its configuration)
// use it; it depends on apimachinery only.
package safedecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

var (
	lineRE   = regexp.MustCompile(`line (\d+)`)
	quotedRE = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'[^']*'|`[^`]*`")
)

// TypeMeta says which of apiVersion and kind raw (a JSON object) lacks,
// or "" when it has both. It never quotes raw.
func TypeMeta(raw []byte) string {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &tm); err != nil {
		return "not a JSON or YAML object"
	}
	switch {
	case tm.Kind == "" && tm.APIVersion == "":
		return "apiVersion and kind are missing"
	case tm.Kind == "":
		return "kind is missing"
	case tm.APIVersion == "":
		return "apiVersion is missing"
	}
	return ""
}

// Describe returns a description of a decoding error that holds none of
// the input: strict-decoding errors (which name unknown or duplicate
// fields) and unregistered kinds as they are, JSON syntax errors by
// offset, YAML errors by line, and anything else with its quoted parts
// removed.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var syn *json.SyntaxError
	switch {
	case runtime.IsMissingKind(err):
		return "kind is missing"
	case runtime.IsMissingVersion(err):
		return "apiVersion is missing"
	case runtime.IsStrictDecodingError(err), runtime.IsNotRegisteredError(err):
		// They name fields and kinds only, in quotes.
		return keepFieldPaths(err.Error())
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at offset %d", syn.Offset)
	}
	msg := err.Error()
	if strings.Contains(msg, "yaml") && strings.ContainsAny(msg, "\"'`") {
		if m := lineRE.FindStringSubmatch(msg); m != nil {
			return "invalid YAML at line " + m[1]
		}
		return "invalid YAML"
	}
	return quotedRE.ReplaceAllString(msg, `"…"`)
}

// keepFieldPaths keeps quoted parts that look like field paths and
// replaces any other quoted part.
func keepFieldPaths(msg string) string {
	return quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		if fieldPath(q[1 : len(q)-1]) {
			return q
		}
		return `"…"`
	})
}

// fieldPath reports whether s looks like a field path or a kind name
// ("spec.containers[0].imagePullPolcy", "ConfigMap", "v1"): letters,
// digits, dots, brackets, dashes, slashes and underscores, at most 128.
func fieldPath(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune(".[]-_/", r):
		default:
			return false
		}
	}
	return true
}
