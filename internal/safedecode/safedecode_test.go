package safedecode_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/pullguard/pullguard/internal/safedecode"
)

const secret = "hunter2secret"

func TestTypeMeta(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`{"apiVersion":"v1","kind":"Secret"}`, ""},
		{`{"apiVersion":"v1","data":{"pw":"` + secret + `"}}`, "kind is missing"},
		{`{"kind":"Secret"}`, "apiVersion is missing"},
		{`{}`, "apiVersion and kind are missing"},
		{`[1,2]`, "not a JSON or YAML object"},
		{secret, "not a JSON or YAML object"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, safedecode.TypeMeta([]byte(tt.raw)), tt.raw)
	}
}

func TestDescribe(t *testing.T) {
	var syn error = json.Unmarshal([]byte(`{"a":"`+secret+`" x}`), &struct{}{})
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "missing kind", err: runtime.NewMissingKindErr(`{"data":"` + secret + `"}`), want: "kind is missing"},
		{name: "missing version", err: runtime.NewMissingVersionErr(`{"data":"` + secret + `"}`), want: "apiVersion is missing"},
		{name: "strict", err: runtime.NewStrictDecodingError([]error{errors.New(`unknown field "spec.passwrd"`)}), want: `strict decoding error: unknown field "spec.passwrd"`},
		{name: "not registered", err: runtime.NewNotRegisteredErrForKind("scheme", schema.GroupVersionKind{Version: "v9", Kind: "Secret"}), want: `no kind "Secret" is registered for version "v9" in scheme "scheme"`},
		{name: "json syntax", err: syn, want: "invalid JSON at offset"},
		{name: "yaml quoting", err: errors.New("yaml: line 4: cannot unmarshal !!str `" + secret + "` into int"), want: "invalid YAML at line 4"},
		{name: "yaml plain", err: errors.New("yaml: line 2: did not find expected key"), want: "yaml: line 2: did not find expected key"},
		{name: "other quoting", err: errors.New(`parsing time "` + secret + `" as RFC3339`), want: `parsing time "…" as RFC3339`},
		{name: "nil", err: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := safedecode.Describe(tt.err)
			assert.Contains(t, got, tt.want)
			assert.NotContains(t, got, secret)
		})
	}
}

func FuzzDescribe(f *testing.F) {
	f.Add(`parsing "x" failed`)
	f.Add("yaml: line 1: `v`")
	f.Fuzz(func(t *testing.T, msg string) {
		out := safedecode.Describe(errors.New(msg))
		// A quoted value never survives.
		for _, q := range []string{`"`, "'", "`"} {
			parts := strings.Split(msg, q)
			for i := 1; i < len(parts)-1; i += 2 {
				if v := parts[i]; len(v) > 8 && !strings.ContainsAny(v, "\"'`\\") && strings.Contains(out, q+v+q) {
					t.Fatalf("quoted %q kept in %q", v, out)
				}
			}
		}
	})
}
