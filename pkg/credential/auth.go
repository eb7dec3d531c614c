package credential

import "fmt"

// AuthConfig is one set of registry credentials, with the fields of the CRI
// AuthConfig and of a docker config entry. Any field may be empty.
//
// AuthConfig never formats its values: fmt's %v, %+v, %s and %#v all print
// a redacted placeholder, so an AuthConfig that reaches a log line or an
// error by mistake leaks nothing.
type AuthConfig struct {
	Username      string
	Password      string
	Auth          string // base64 "username:password", as in a docker config
	IdentityToken string
	RegistryToken string
}

// Empty reports whether no field is set (an anonymous pull).
func (a AuthConfig) Empty() bool { return a == AuthConfig{} }

// String implements fmt.Stringer without revealing any value.
func (a AuthConfig) String() string { return a.redacted() }

// GoString implements fmt.GoStringer without revealing any value.
func (a AuthConfig) GoString() string { return a.redacted() }

// Format implements fmt.Formatter so that every verb is redacted.
func (a AuthConfig) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.redacted())) }

func (a AuthConfig) redacted() string {
	if a.Empty() {
		return "AuthConfig{anonymous}"
	}
	set := make([]byte, 0, 64)
	add := func(name, v string) {
		if v == "" {
			return
		}
		if len(set) > 0 {
			set = append(set, ',')
		}
		set = append(set, name...)
	}
	add("username", a.Username)
	add("password", a.Password)
	add("auth", a.Auth)
	add("identityToken", a.IdentityToken)
	add("registryToken", a.RegistryToken)
	return "AuthConfig{redacted: " + string(set) + "}"
}
