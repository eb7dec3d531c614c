package criproxy

import (
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/pullguard/pullguard/pkg/credential"
)

// recordSource is what a credential that pulled through the CRI is filed
// under. The CRI gives the pod's namespace, name and uid but no secret
// coordinates, so the entry is a secret entry (never node-wide) in the
// pod's namespace, named by the hash's printed prefix: pods of a namespace
// that present the same credential share one entry, `pullguard records`
// shows where it came from, and deleting the namespace can forget it. It
// is matched by hash only: the proxy never presents coordinates.
func recordSource(namespace string, h credential.Hash) credential.Source {
	if len(validation.IsDNS1123Label(namespace)) > 0 {
		// No pod, or not a namespace the kubelet would send.
		namespace = NoNamespace
	}
	return credential.Source{Kind: credential.SourceSecret, Namespace: namespace, Name: SourceNamePrefix + h.String()}
}

// The names recordSource files CRI credentials under.
const (
	// SourceNamePrefix starts the name of every secret entry the proxy
	// records; the rest is the credential hash's 12-hex-digit prefix.
	SourceNamePrefix = "cri-auth-"
	// NoNamespace is the namespace of an entry recorded from a PullImage
	// without pod metadata (crictl pull without --pod-config).
	NoNamespace = "_no-pod"
)
