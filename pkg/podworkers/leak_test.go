package podworkers_test

import (
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// TestDecodeErrorsNeverQuoteCredentials feeds documents that hold a
// distinctive password (in stringData, in base64 data, in a Pod's env, in
// a List) and are wrong in every way the decoders report, and scans each
// error for every form of the password. Each error still names the file
// and the document.
func TestDecodeErrorsNeverQuoteCredentials(t *testing.T) {
	const pw = "pw-leak-7Hq/+u&x\"z"
	auth := base64.StdEncoding.EncodeToString([]byte("alice:" + pw))
	dockerJSON := fmt.Sprintf(`{"auths":{"r.example":{"username":"alice","password":%q,"auth":%q}}}`, pw, auth)
	data := base64.StdEncoding.EncodeToString([]byte(dockerJSON))
	secret := func(head, tail string) string {
		return head + "metadata: {name: s, namespace: team-a}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '" + dockerJSON + "'\n" + tail
	}
	tests := []struct {
		name  string
		doc   string
		wants []string
	}{
		{name: "secret without kind", doc: secret("apiVersion: v1\n", ""), wants: []string{"document 1", "kind is missing"}},
		{name: "secret without apiVersion", doc: secret("kind: Secret\n", ""), wants: []string{"apiVersion is missing"}},
		{name: "secret without either", doc: secret("", ""), wants: []string{"apiVersion and kind are missing"}},
		{name: "secret with base64 data, no kind", doc: "apiVersion: v1\nmetadata: {name: s}\ndata: {.dockerconfigjson: " + data + "}\n", wants: []string{"kind is missing"}},
		{name: "secret with an unknown field", doc: secret("apiVersion: v1\nkind: Secret\n", "passwrd: "+pw+"x\n"), wants: []string{"passwrd"}},
		{name: "secret with a wrong type", doc: secret("apiVersion: v1\nkind: Secret\n", "immutable: '"+pw+"'\n"), wants: []string{"document 1"}},
		{name: "secret with bad base64 data", doc: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {.dockerconfigjson: '" + pw + "'}\n", wants: []string{"document 1"}},
		{name: "broken YAML after the password", doc: secret("apiVersion: v1\nkind: Secret\n", "  : ["), wants: []string{"document 1"}},
		{name: "broken YAML around the password", doc: "apiVersion: v1\nkind: Secret\nstringData: {a: '" + pw + "', b: [\n", wants: []string{"document 1"}},
		{name: "broken JSON", doc: `{"apiVersion":"v1","kind":"Secret","stringData":{"a":"` + pw + `" "b"}}`, wants: []string{"document 1"}},
		{name: "service account without kind", doc: "apiVersion: v1\nmetadata: {name: sa, annotations: {token: '" + pw + "'}}\n", wants: []string{"kind is missing"}},
		{name: "pod with env, no kind", doc: "apiVersion: v1\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a, env: [{name: PW, value: '" + pw + "'}]}]}\n", wants: []string{"kind is missing"}},
		{name: "pod with a wrong type next to env", doc: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a, env: [{name: PW, value: '" + pw + "'}], tty: '" + pw + "'}]}\n", wants: []string{"document 1"}},
		{name: "list item without kind", doc: "apiVersion: v1\nkind: List\nitems:\n- " + fmt.Sprintf(`{"apiVersion":"v1","metadata":{"name":"s"},"stringData":{"a":%q}}`, pw) + "\n", wants: []string{"items[0]", "kind is missing"}},
		{name: "unsupported kind with data", doc: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {pw: '" + pw + "'}\n", wants: []string{"ConfigMap"}},
		{name: "unregistered kind", doc: "apiVersion: v9\nkind: Secret\nmetadata: {name: c}\nstringData: {pw: '" + pw + "'}\n", wants: []string{"document 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := podworkers.Load("tenant.yaml", []byte(tt.doc))
			require.ErrorIs(t, err, podworkers.ErrInvalidManifest)
			for _, f := range leak.Scan(map[string]string{"error": err.Error()}, pw, auth) {
				assert.Fail(t, "the error holds a credential", "as %q: %s", f.Form, err)
			}
			assert.Contains(t, err.Error(), "tenant.yaml")
			for _, w := range tt.wants {
				assert.Contains(t, err.Error(), w)
			}
			t.Log(err)
		})
	}
}
