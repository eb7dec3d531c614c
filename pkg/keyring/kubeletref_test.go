package keyring_test

import (
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// refMatch is the kubelet's URLsMatchStr(glob, target) (k8s.io/kubernetes
// pkg/credentialprovider/keyring.go), written out with the same library
// calls on every call and nothing precomputed: the reference that
// keyring.Pattern, which compiles the glob once and walks the target
// without allocating, is compared with. (test/kubelet compares the
// keyrings with the kubelet's own code.)
func refMatch(glob, target string) bool {
	g, err := url.Parse("https://" + glob)
	if err != nil {
		return false
	}
	tu, err := url.Parse("https://" + target)
	if err != nil {
		return false
	}
	gLabels, gPort := refSplit(g)
	tLabels, tPort := refSplit(tu)
	if gPort != tPort || len(gLabels) != len(tLabels) || !strings.HasPrefix(tu.Path, g.Path) {
		return false
	}
	for i := range gLabels {
		if ok, err := filepath.Match(gLabels[i], tLabels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// refSplit is the kubelet's SplitURL.
func refSplit(u *url.URL) ([]string, string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// refConfigKey is the key the kubelet's BasicDockerKeyring.Add files an
// entry under, ok false when it skips the entry.
func refConfigKey(raw string) (string, bool) {
	v := raw
	if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
		v = "https://" + v
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", false
	}
	p := u.Path
	if strings.HasPrefix(p, "/v2/") || strings.HasPrefix(p, "/v1/") {
		p = p[3:]
	}
	if len(p) > 0 && p != "/" {
		return u.Host + p, true
	}
	return u.Host, true
}

// refDockerHub is the kubelet's isDefaultRegistryMatch.
func refDockerHub(name string) bool {
	parts := strings.SplitN(name, "/", 2)
	switch {
	case parts[0] == "":
		return false
	case len(parts) == 1, parts[0] == "docker.io", parts[0] == "index.docker.io":
		return true
	}
	return !strings.ContainsAny(parts[0], ".:")
}
