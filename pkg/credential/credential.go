package credential

// Credential is one credential a pod can present for an image: the
// registry it is for, its fields, where it came from, and its keyed hash.
// Only Source and Hash are ever remembered; Auth is handed to the runtime
// for a pull and then forgotten.
type Credential struct {
	Registry string
	Auth     AuthConfig
	Source   Source
	Hash     Hash
}

// Anonymous reports whether the credential carries no authentication.
func (c Credential) Anonymous() bool { return c.Auth.Empty() }
