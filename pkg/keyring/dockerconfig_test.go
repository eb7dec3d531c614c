package keyring_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

func TestParseDockerConfigJSONFixture(t *testing.T) {
	got, err := keyring.ParseDockerConfigJSON(fixture(t, "config.json"))
	require.NoError(t, err)
	want := []keyring.ConfigEntry{
		{Key: "https://index.docker.io/v1/", Auth: credential.AuthConfig{Username: "hubuser", Password: "pw-hub-K2m"}},
		{Key: "registry.example", Auth: credential.AuthConfig{Username: "team-a", Password: "pw-team-a-Xq7"}},
		{Key: "*.example", Auth: credential.AuthConfig{Username: "wild", Password: "pw-wild-J9p"}},
		// Its identitytoken is not kept, as the kubelet does not read it.
		{Key: "registry.example:5000/team-b", Auth: credential.AuthConfig{}},
		// No credential fields: kept, as the kubelet keeps it.
		{Key: "creds-in-store.example", Auth: credential.AuthConfig{}},
	}
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].Key, got[i].Key, "entry %d key (file order)", i)
		assertSameAuth(t, want[i].Auth, got[i].Auth, want[i].Key)
	}
}

func TestParseDockercfgFixture(t *testing.T) {
	got, err := keyring.ParseDockercfg(fixture(t, "dockercfg"))
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "registry.example", got[0].Key)
	assertSameAuth(t, credential.AuthConfig{Username: "legacy", Password: "pw-legacy-Tt1"}, got[0].Auth, got[0].Key)
	assert.Equal(t, "http://legacy.example/v2/", got[1].Key)
	assertSameAuth(t, credential.AuthConfig{Username: "old", Password: "pw-old-Vb3"}, got[1].Auth, got[1].Key)
}

func TestParseDockerConfigEntries(t *testing.T) {
	tests := []struct {
		name    string
		auths   string // the "auths" object; also tried bare as a .dockercfg
		wantKey []string
		want    []credential.AuthConfig
	}{
		{
			name:    "auth fills username and password, and is not kept itself",
			auths:   `{"r.example":{"auth":"` + b64("alice:pw-s3cret-Qz8") + `"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "alice", Password: "pw-s3cret-Qz8"}},
		},
		{
			name:    "unpadded auth",
			auths:   `{"r.example":{"auth":"YWxpY2U6cHctczNjcmV0LVF6OA"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "alice", Password: "pw-s3cret-Qz8"}},
		},
		{
			name:    "password split at the first colon",
			auths:   `{"r.example":{"auth":"` + b64("alice:pw:s3cret") + `"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "alice", Password: "pw:s3cret"}},
		},
		{
			// The kubelet keeps the password as decoded (the docker CLI
			// trims NULs; the kubelet is the reference here).
			name:    "trailing NULs kept in the password, as the kubelet keeps them",
			auths:   `{"r.example":{"auth":"` + b64("alice:pw\x00\x00") + `"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "alice", Password: "pw\x00\x00"}},
		},
		{
			// The kubelet (DockerConfigEntry.UnmarshalJSON) and the docker
			// CLI both replace username and password with auth's.
			name:    "auth wins over explicit username and password",
			auths:   `{"r.example":{"username":"bob","password":"pw-s3cret-Qz8","auth":"` + b64("alice:other") + `"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "alice", Password: "other"}},
		},
		{
			// encoding/base64, in the kubelet too, skips line breaks.
			name:    "line break after auth skipped, as in the kubelet",
			auths:   `{"r.example":{"auth":"` + b64("alice:pw-s3cret-Qz8") + `\n"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "alice", Password: "pw-s3cret-Qz8"}},
		},
		{
			name:    "token fields, email and unknown fields not kept, as the kubelet reads none of them",
			auths:   `{"r.example":{"identitytoken":"idtok-team-b-Zr4","registrytoken":"regtok-Lm5","email":"x@example.test","unknown":1}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{}},
		},
		{
			name:    "field names match case-insensitively",
			auths:   `{"r.example":{"Username":"bob","PASSWORD":"pw-s3cret-Qz8","IdentityToken":"idtok-team-b-Zr4"}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "bob", Password: "pw-s3cret-Qz8"}},
		},
		{
			name:    "file order kept",
			auths:   `{"z.example":{"username":"z"},"a.example":{"username":"a"},"m.example":{"username":"m"}}`,
			wantKey: []string{"z.example", "a.example", "m.example"},
			want:    []credential.AuthConfig{{Username: "z"}, {Username: "a"}, {Username: "m"}},
		},
		{
			name:    "repeated key: the later entry replaces the earlier in place",
			auths:   `{"a.example":{"username":"first"},"b.example":{"username":"b"},"a.example":{"username":"second"}}`,
			wantKey: []string{"a.example", "b.example"},
			want:    []credential.AuthConfig{{Username: "second"}, {Username: "b"}},
		},
		{
			name:    "empty and null entries kept, as the kubelet keeps them",
			auths:   `{"a.example":{},"b.example":null,"c.example":{"email":"only@example.test"}}`,
			wantKey: []string{"a.example", "b.example", "c.example"},
			want:    []credential.AuthConfig{{}, {}, {}},
		},
		{
			// The kubelet reads neither field: another type is no error.
			name:    "tokens that are not strings are ignored",
			auths:   `{"r.example":{"username":"u","identitytoken":5,"registrytoken":{"a":1}}}`,
			wantKey: []string{"r.example"},
			want:    []credential.AuthConfig{{Username: "u"}},
		},
		{
			name:    "empty object",
			auths:   `{}`,
			wantKey: []string{},
			want:    []credential.AuthConfig{},
		},
	}
	for _, tt := range tests {
		check := func(t *testing.T, got []keyring.ConfigEntry, err error) {
			require.NoError(t, err)
			require.Len(t, got, len(tt.wantKey))
			for i := range tt.wantKey {
				assert.Equal(t, tt.wantKey[i], got[i].Key)
				assertSameAuth(t, tt.want[i], got[i].Auth, tt.wantKey[i])
			}
		}
		t.Run(tt.name+"/dockerconfigjson", func(t *testing.T) {
			got, err := keyring.ParseDockerConfigJSON([]byte(`{"auths":` + tt.auths + `}`))
			check(t, got, err)
		})
		t.Run(tt.name+"/dockercfg", func(t *testing.T) {
			got, err := keyring.ParseDockercfg([]byte(tt.auths))
			check(t, got, err)
		})
	}
}

func TestParseDockerConfigJSONTopLevel(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		wantKeys int
	}{
		{name: "no auths", data: `{"credsStore":"desktop"}`, wantKeys: 0},
		{name: "null auths", data: `{"auths":null}`, wantKeys: 0},
		{name: "null document", data: `null`, wantKeys: 0},
		{name: "a later null auths drops the entries so far", data: `{"auths":{"a.example":{}},"auths":null,"AUTHS":{"b.example":{}}}`, wantKeys: 1},
		{name: "auths objects merge", data: `{"auths":{"a.example":{}},"Auths":{"b.example":{},"a.example":{"username":"u"}}}`, wantKeys: 2},
		{name: "HttpHeaders of strings", data: `{"HttpHeaders":{"User-Agent":"docker"},"httpheaders":null}`, wantKeys: 0},
		{name: "auths key case-insensitive", data: `{"Auths":{"r.example":{"username":"u"}}}`, wantKeys: 1},
		{name: "auths after other fields", data: `{"a":[1,{"b":null}],"auths":{"r.example":{"username":"u"}},"c":"d"}`, wantKeys: 1},
		{name: "surrounding white space", data: " \n{\"auths\":{}}\n\t", wantKeys: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyring.ParseDockerConfigJSON([]byte(tt.data))
			require.NoError(t, err)
			assert.Len(t, got, tt.wantKeys)
		})
	}
}

func TestParseDockerConfigErrors(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		legacy    bool   // parse as .dockercfg
		wantInErr string // a fragment the message must hold
	}{
		{name: "not JSON", data: `pw-s3cret-Qz8`, wantInErr: "malformed JSON"},
		{name: "empty", data: ``, wantInErr: "unexpected end"},
		{name: "truncated", data: `{"auths":{"r.example":{"password":"pw-s3cret-Qz8"`, wantInErr: "unexpected end"},
		{name: "bad escape inside a password", data: `{"auths":{"r.example":{"password":"pw-s3cret-Qz8\q"}}}`, wantInErr: "byte offset"},
		{name: "top level array", data: `["pw-s3cret-Qz8"]`, wantInErr: "top level is not a JSON object"},
		{name: "HttpHeaders not an object", data: `{"auths":{},"HttpHeaders":5}`, wantInErr: `"HttpHeaders" is not an object of strings`},
		{name: "HttpHeaders value not a string", data: `{"auths":{},"httpHeaders":{"X":1}}`, wantInErr: `"httpHeaders" is not an object of strings`},
		{name: "email not a string", data: `{"auths":{"r.example":{"email":5}}}`, wantInErr: `field "email" has the wrong JSON type`},
		{name: "auths array", data: `{"auths":["pw-s3cret-Qz8"]}`, wantInErr: `"auths" is not a JSON object`},
		{name: "entry not an object", data: `{"auths":{"r.example":"pw-s3cret-Qz8"}}`, wantInErr: `entry "r.example": not a JSON object`},
		{name: "password of the wrong type", data: `{"auths":{"r.example":{"password":12345678}}}`, wantInErr: `field "password" has the wrong JSON type`},
		{name: "bad base64 auth", data: `{"auths":{"r.example":{"auth":"pw-s3cret-Qz8!!"}}}`, wantInErr: `entry "r.example": field "auth" is not valid base64`},
		{name: "space before auth", data: `{"auths":{"r.example":{"auth":" ` + b64("alice:pw-s3cret-Qz8") + `"}}}`, wantInErr: `field "auth" is not valid base64`},
		{name: "space after padded auth", data: `{"auths":{"r.example":{"auth":"` + b64("alice:pw-s3cret-Qz8") + ` "}}}`, wantInErr: `field "auth" is not valid base64`},
		{name: "tab after unpadded auth", data: `{"auths":{"r.example":{"auth":"YWxpY2U6cHctczNjcmV0LVF6OA\t"}}}`, wantInErr: `field "auth" is not valid base64`},
		{name: "auth without a colon", data: `{"auths":{"r.example":{"auth":"` + b64("pw-s3cret-Qz8") + `"}}}`, wantInErr: `does not decode to "username:password"`},
		{name: "data after the object", data: `{"auths":{}} {"pw-s3cret-Qz8":1}`, wantInErr: "data after the top-level object"},
		{name: "legacy: not an object", data: `"pw-s3cret-Qz8"`, legacy: true, wantInErr: "top level is not a JSON object"},
		{name: "legacy: bad auth", data: `{"r.example":{"auth":"%%%pw-s3cret-Qz8"}}`, legacy: true, wantInErr: `entry "r.example"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parse := keyring.ParseDockerConfigJSON
			if tt.legacy {
				parse = keyring.ParseDockercfg
			}
			got, err := parse([]byte(tt.data))
			require.Error(t, err)
			assert.Nil(t, got)
			assert.ErrorIs(t, err, keyring.ErrInvalidDockerConfig)
			assertNoSecrets(t, err.Error())
			assert.NotContains(t, err.Error(), "12345678")
			if !t.Failed() { // the message is safe to print
				assert.Contains(t, err.Error(), tt.wantInErr)
			}
		})
	}
}
