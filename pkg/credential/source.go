package credential

import "fmt"

// SourceKind says where a credential came from, which decides who else on
// the node may be assumed to hold it.
type SourceKind uint8

const (
	// SourceNone is the zero value: no credential (an anonymous pull).
	SourceNone SourceKind = iota
	// SourceSecret is a pod's image pull secret (Namespace, Name, UID set).
	SourceSecret
	// SourceServiceAccount is a credential that a service-account-token
	// credential provider returned for a pod's service account (Namespace,
	// Name, UID set).
	SourceServiceAccount
	// SourceNode is a node-level credential (the node's docker config or a
	// credential provider not bound to a service account): every pod on the
	// node can use it.
	SourceNode
)

// String returns the lowercase name of the kind.
func (k SourceKind) String() string {
	switch k {
	case SourceNone:
		return "none"
	case SourceSecret:
		return "secret"
	case SourceServiceAccount:
		return "serviceaccount"
	case SourceNode:
		return "node"
	default:
		return fmt.Sprintf("SourceKind(%d)", uint8(k))
	}
}

// Source identifies where a credential came from. For SourceSecret and
// SourceServiceAccount the coordinates name the Kubernetes object; for
// SourceNode, Name may describe the node source (for example a plugin name).
type Source struct {
	Kind      SourceKind
	Namespace string
	Name      string
	UID       string
}

// NodeAccessible reports whether every pod on the node can use credentials
// from this source, so an image pulled with them needs no verification.
func (s Source) NodeAccessible() bool { return s.Kind == SourceNone || s.Kind == SourceNode }

// String formats the source for logs and events: kind and coordinates only.
func (s Source) String() string {
	switch s.Kind {
	case SourceSecret, SourceServiceAccount:
		return s.Kind.String() + " " + s.Namespace + "/" + s.Name + " (uid " + s.UID + ")"
	case SourceNode:
		if s.Name != "" {
			return "node (" + s.Name + ")"
		}
		return "node"
	default:
		return s.Kind.String()
	}
}
