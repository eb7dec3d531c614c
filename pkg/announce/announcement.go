package announce

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pullguard/pullguard/internal/safedecode"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// Scope is the cache key under which the kubelet files a plugin's answer,
// which decides for which images it hands the answer out: the cacheKeyType
// of the response, or Image when the kubelet does not cache it at all.
type Scope string

// The scopes, as the response's cacheKeyType names them.
const (
	// ScopeImage: only for the image the kubelet asked about.
	ScopeImage Scope = "Image"
	// ScopeRegistry: for every image of that image's registry.
	ScopeRegistry Scope = "Registry"
	// ScopeGlobal: for every image the provider's matchImages match.
	ScopeGlobal Scope = "Global"
)

// Limits of one announcement.
const (
	// MaxCredentials is the most credentials one announcement holds (a
	// response with more auth entries is not announced).
	MaxCredentials = 64
	// MaxMatchImages is the most matchImages patterns it holds.
	MaxMatchImages = 64
	// MaxFileSize bounds an announcement file.
	MaxFileSize = 64 << 10
	// maxNameLen bounds the provider's name and the image.
	maxNameLen = 512
)

// The announcement's apiVersion and kind.
const (
	APIVersion = "announce.pullguard.io/v1"
	Kind       = "NodeCredentialAnnouncement"
)

// Announcement is one plugin answer as the kubelet got it, hashed: what a
// file of the directory holds.
type Announcement struct {
	// Provider is the plugin's name: the recorded source is "node
	// (<Provider>)".
	Provider string
	// Image is the image the kubelet asked the plugin about (a repository
	// name, as the kubelet sends it).
	Image string
	// Scope says for which images the kubelet hands the answer out.
	Scope Scope
	// MatchImages are the provider's matchImages: the kubelet runs the
	// plugin, and hands a cached answer out, only for images they match.
	// Empty: the wrapper was not told them, and only the credentials'
	// patterns and the scope restrict.
	MatchImages []string
	// Credentials are the answer's auth entries.
	Credentials []Credential
	// ExpiresAt is when the announcement stops counting.
	ExpiresAt time.Time
}

// Credential is one auth entry of an answer: its key as the plugin wrote
// it (the kubelet files it with keyring.ConfigKey) and the keyed hash (credential.Hasher.HashAuth, under the directory's
// key) of its username and password, which is what the kubelet presents
// of it.
type Credential struct {
	Pattern string
	Hash    credential.Hash
}

// wire is the JSON form of an Announcement.
type wire struct {
	APIVersion  string           `json:"apiVersion"`
	Kind        string           `json:"kind"`
	Provider    string           `json:"provider"`
	Image       string           `json:"image"`
	Scope       Scope            `json:"scope"`
	MatchImages []string         `json:"matchImages,omitempty"`
	ExpiresAt   time.Time        `json:"expiresAt"`
	Credentials []wireCredential `json:"credentials"`
}

type wireCredential struct {
	Pattern string `json:"pattern"`
	Hash    string `json:"hash"`
}

// Encode returns a's JSON form.
func Encode(a Announcement) ([]byte, error) {
	w := wire{
		APIVersion: APIVersion, Kind: Kind,
		Provider: a.Provider, Image: a.Image, Scope: a.Scope, MatchImages: a.MatchImages,
		ExpiresAt: a.ExpiresAt.UTC(), Credentials: make([]wireCredential, len(a.Credentials)),
	}
	for i, c := range a.Credentials {
		w.Credentials[i] = wireCredential{Pattern: c.Pattern, Hash: hex.EncodeToString(c.Hash[:])}
	}
	if _, err := check(w); err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// Decode reads an announcement strictly: apiVersion and kind as written
// by Encode, no unknown field, no trailing data, every field valid (see
// check). Errors name the field, never quote the data.
func Decode(data []byte) (*Announcement, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return nil, errors.New(safedecode.Describe(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the announcement")
	}
	return check(w)
}

// check validates a decoded announcement and converts it.
func check(w wire) (*Announcement, error) {
	switch {
	case w.APIVersion != APIVersion:
		return nil, fmt.Errorf("apiVersion is not %s", APIVersion)
	case w.Kind != Kind:
		return nil, fmt.Errorf("kind is not %s", Kind)
	case !validName(w.Provider):
		return nil, errors.New("provider: must be 1 to 512 printable characters without '/'")
	case len(w.Image) > maxNameLen:
		return nil, errors.New("image: too long")
	case w.ExpiresAt.IsZero():
		return nil, errors.New("expiresAt: required")
	case len(w.Credentials) == 0 || len(w.Credentials) > MaxCredentials:
		return nil, fmt.Errorf("credentials: must hold 1 to %d entries", MaxCredentials)
	case len(w.MatchImages) > MaxMatchImages:
		return nil, fmt.Errorf("matchImages: more than %d entries", MaxMatchImages)
	}
	switch w.Scope {
	case ScopeImage, ScopeRegistry, ScopeGlobal:
	default:
		return nil, errors.New("scope: must be Image, Registry or Global")
	}
	if _, err := keyring.ParseImage(w.Image); err != nil {
		return nil, errors.New("image: not a valid image reference")
	}
	for i, m := range w.MatchImages {
		if _, err := keyring.ParsePattern(m); err != nil {
			return nil, fmt.Errorf("matchImages[%d]: not a valid image pattern", i)
		}
	}
	if len(w.MatchImages) == 0 {
		w.MatchImages = nil
	}
	a := &Announcement{
		Provider: w.Provider, Image: w.Image, Scope: w.Scope, MatchImages: w.MatchImages,
		ExpiresAt: w.ExpiresAt, Credentials: make([]Credential, len(w.Credentials)),
	}
	for i, c := range w.Credentials {
		if _, err := keyring.ConfigKey(c.Pattern); err != nil {
			return nil, fmt.Errorf("credentials[%d].pattern: not a valid image pattern", i)
		}
		if len(c.Hash) != 2*credential.HashSize {
			return nil, fmt.Errorf("credentials[%d].hash: must be %d hex digits", i, 2*credential.HashSize)
		}
		if _, err := hex.Decode(a.Credentials[i].Hash[:], []byte(c.Hash)); err != nil {
			return nil, fmt.Errorf("credentials[%d].hash: must be %d hex digits", i, 2*credential.HashSize)
		}
		a.Credentials[i].Pattern = c.Pattern
	}
	return a, nil
}

// validName: a plugin's name, as the recorded source shows it.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return false
		}
	}
	return true
}
