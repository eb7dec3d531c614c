package keyring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pullguard/pullguard/internal/dockerauth"
	"github.com/pullguard/pullguard/pkg/credential"
)

// ConfigEntry is one entry of a docker config: the key it is filed under (a
// registry, optionally with a scheme, a port and a path) and its
// credential.
type ConfigEntry struct {
	Key  string
	Auth credential.AuthConfig
}

// ParseDockerConfigJSON parses the docker CLI's config.json format, the
// data of a kubernetes.io/dockerconfigjson secret: {"auths": {KEY: ENTRY}}.
// It accepts and rejects what the kubelet's encoding/json decoding into its
// DockerConfigJSON does: "HttpHeaders" must be an object of strings, other
// top-level fields (credsStore, credHelpers...) are ignored, a missing or
// null "auths" (or a null document) is an empty config, and a null
// "auths" after another drops the entries read so far.
//
// Entries are returned in file order. An entry's credential is its
// "username" and "password", or its "auth" (field names match
// case-insensitively; "email" must be a string and is not kept; every
// other field is ignored, "identitytoken" and "registrytoken" included,
// as the kubelet's DockerConfigEntry has neither and never presents them).
// When a key appears twice the later entry replaces the earlier one in
// place, as a map does. An entry without any credential field (null, or
// what the docker CLI writes when a credential store holds the secret) is
// kept with an empty AuthConfig, as the kubelet keeps it.
//
// "auth" is decoded as the kubelet decodes it (dockerauth.Kubelet): base64
// (padded or not) of "username:password", split at the first colon, with
// no white space around it. When present it wins: its username and
// password replace any explicit "username" and "password", as in the
// kubelet and the docker CLI. Auth itself is left empty, as the kubelet
// keeps only the username and password it decodes: one account is one
// credential, and one hash, however the entry spells it.
//
// Errors wrap ErrInvalidDockerConfig and never quote the data: a JSON
// syntax error gives its byte offset, a bad "auth" names its entry key.
func ParseDockerConfigJSON(data []byte) ([]ConfigEntry, error) {
	return parseConfig(data, true)
}

// ParseDockercfg parses the legacy .dockercfg format, the data of a
// kubernetes.io/dockercfg secret: a bare {KEY: ENTRY} map (null is an
// empty one). Entries are treated as in ParseDockerConfigJSON.
func ParseDockercfg(data []byte) ([]ConfigEntry, error) {
	return parseConfig(data, false)
}

// configEntryJSON is one entry as the docker CLI writes it.
type configEntryJSON struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
	Email    string `json:"email"`
}

// configParser walks a config with a token decoder so that file order is
// kept (a map would lose it).
type configParser struct {
	dec     *json.Decoder
	entries []ConfigEntry
	index   map[string]int
}

func parseConfig(data []byte, wrapped bool) ([]ConfigEntry, error) {
	p := &configParser{dec: json.NewDecoder(bytes.NewReader(data))}
	var err error
	if wrapped {
		err = p.topLevel()
	} else {
		err = p.authsObject("top level")
	}
	if err == nil {
		err = p.end()
	}
	if err != nil {
		return nil, err
	}
	return p.entries, nil
}

// topLevel reads {"auths": {...}, ...}, or null.
func (p *configParser) topLevel() error {
	if err := p.openObject("top level"); err != nil {
		if errors.Is(err, errNull) {
			return nil
		}
		return err
	}
	for p.dec.More() {
		key, err := p.key()
		if err != nil {
			return err
		}
		switch {
		case strings.EqualFold(key, "auths"):
			if err := p.authsObject(`"auths"`); err != nil {
				return err
			}
		case strings.EqualFold(key, "HttpHeaders"):
			var headers map[string]string
			if err := p.dec.Decode(&headers); err != nil {
				var typ *json.UnmarshalTypeError
				if errors.As(err, &typ) {
					return fmt.Errorf("%w: %q is not an object of strings", ErrInvalidDockerConfig, key)
				}
				return jsonError(err, "")
			}
		default:
			var skip json.RawMessage
			if err := p.dec.Decode(&skip); err != nil {
				return jsonError(err, "")
			}
		}
	}
	return p.closeObject()
}

// authsObject reads {KEY: ENTRY, ...}, or null, which drops the entries
// read so far (encoding/json sets a map to nil for null).
func (p *configParser) authsObject(what string) error {
	if err := p.openObject(what); err != nil {
		if errors.Is(err, errNull) {
			p.entries, p.index = nil, nil
			return nil
		}
		return err
	}
	for p.dec.More() {
		key, err := p.key()
		if err != nil {
			return err
		}
		var raw configEntryJSON
		if err := p.dec.Decode(&raw); err != nil {
			return jsonError(err, key)
		}
		auth, err := entryAuth(raw)
		if err != nil {
			return fmt.Errorf("%w: entry %s: %w", ErrInvalidDockerConfig, quoteKey(key), err)
		}
		p.add(key, auth)
	}
	return p.closeObject()
}

// add appends an entry, or replaces an earlier entry with the same key.
func (p *configParser) add(key string, auth credential.AuthConfig) {
	if i, ok := p.index[key]; ok {
		p.entries[i].Auth = auth
		return
	}
	if p.index == nil {
		p.index = make(map[string]int)
	}
	p.index[key] = len(p.entries)
	p.entries = append(p.entries, ConfigEntry{Key: key, Auth: auth})
}

var errNull = errors.New("null")

// openObject reads the '{' that opens an object. A JSON null gives
// errNull.
func (p *configParser) openObject(what string) error {
	tok, err := p.dec.Token()
	if err != nil {
		return jsonError(err, "")
	}
	if tok == nil {
		return errNull
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%w: %s is not a JSON object", ErrInvalidDockerConfig, what)
	}
	return nil
}

func (p *configParser) closeObject() error {
	if _, err := p.dec.Token(); err != nil { // the '}' that More() saw
		return jsonError(err, "")
	}
	return nil
}

func (p *configParser) key() (string, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return "", jsonError(err, "")
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("%w: object key is not a string", ErrInvalidDockerConfig)
	}
	return key, nil
}

// end checks that nothing but white space follows the config.
func (p *configParser) end() error {
	if _, err := p.dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the top-level object", ErrInvalidDockerConfig)
	}
	return nil
}

// entryAuth turns a decoded entry into an AuthConfig, decoding "auth".
func entryAuth(raw configEntryJSON) (credential.AuthConfig, error) {
	auth := credential.AuthConfig{Username: raw.Username, Password: raw.Password}
	if raw.Auth == "" {
		return auth, nil
	}
	user, pass, err := dockerauth.Decode(raw.Auth, dockerauth.Kubelet)
	if err != nil {
		return credential.AuthConfig{}, err
	}
	auth.Username, auth.Password = user, pass
	return auth, nil
}

// jsonError describes a JSON decoding error without quoting the data:
// encoding/json's messages can echo a character of the input, which may be
// part of a password.
func jsonError(err error, key string) error {
	where := ""
	if key != "" {
		where = "entry " + quoteKey(key) + ": "
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("%w: %smalformed JSON at byte offset %d", ErrInvalidDockerConfig, where, syntax.Offset)
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Errorf("%w: %snot a JSON object", ErrInvalidDockerConfig, where)
	case errors.As(err, &typ):
		return fmt.Errorf("%w: %sfield %q has the wrong JSON type, want %s", ErrInvalidDockerConfig, where, typ.Field, typ.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %sunexpected end of JSON", ErrInvalidDockerConfig, where)
	default:
		return fmt.Errorf("%w: %smalformed JSON", ErrInvalidDockerConfig, where)
	}
}

// maxKeyInError bounds how much of an entry key an error quotes.
const maxKeyInError = 128

// quoteKey quotes an entry key (a registry name, not a credential) for an
// error message, truncated so a huge key cannot flood a log.
func quoteKey(key string) string {
	if len(key) > maxKeyInError {
		return fmt.Sprintf("%q...", key[:maxKeyInError])
	}
	return fmt.Sprintf("%q", key)
}
