package keyring

import (
	"fmt"
	"strings"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/imageref"
)

// dockerHub is the name pullguard (like Kubernetes) gives Docker Hub.
const dockerHub = "docker.io"

// Image is the part of an image reference that credentials are matched
// against: its registry and its repository, without tag or digest.
type Image struct {
	// Registry is the normalized registry host with its port, if any:
	// lower case, Docker Hub folded into "docker.io".
	Registry string
	// Repository is the repository path inside the registry, with Docker
	// Hub's implicit "library/" namespace made explicit.
	Repository string

	host string // Registry without the port
	port string // "" when the reference names no port
}

// Host returns the registry host without its port.
func (im Image) Host() string { return im.host }

// Port returns the registry port, or "" when the reference names none.
func (im Image) Port() string { return im.port }

// String returns the normalized repository name, such as
// "docker.io/library/alpine".
func (im Image) String() string { return im.Registry + "/" + im.Repository }

// ParseImage parses an image reference with the kubelet's grammar
// (imageref.Parse, that of distribution/reference): what the kubelet
// rejects is an error wrapping ErrInvalidImage and imageref.ErrInvalid,
// with the kubelet's reason. For matching credentials, the registry is then
// compared case-insensitively and Docker Hub's aliases (index.docker.io,
// registry-1.docker.io) are folded into "docker.io", with "library/" made
// explicit for an official image.
func ParseImage(image string) (Image, error) {
	ref, err := imageref.Parse(image)
	if err != nil {
		return Image{}, fmt.Errorf("%w: %w", ErrInvalidImage, err)
	}
	registry := credential.NormalizeRegistry(ref.Registry()) // no allocation when already lower case
	path := ref.Repository()
	// imageref checked the host and port; a port of any length is the
	// kubelet's grammar.
	host, port := registry, ""
	if i := strings.LastIndexByte(registry, ':'); i >= 0 && i > strings.LastIndexByte(registry, ']') {
		host, port = registry[:i], registry[i+1:]
	}
	if registry == dockerHub {
		host = dockerHub
		if strings.IndexByte(path, '/') < 0 {
			path = "library/" + path
		}
	}
	return Image{Registry: registry, Repository: path, host: host, port: port}, nil
}

// ImageRegistry returns the normalized registry (host[:port]) of an image
// reference: "docker.io" for Docker Hub images, lower case otherwise. It is
// the registry a credential found for the image is presented to, and the
// one to pass to credential.Hasher.Hash.
func ImageRegistry(image string) (string, error) {
	im, err := ParseImage(image)
	if err != nil {
		return "", err
	}
	return im.Registry, nil
}

// splitHostPort splits "host[:port]" (or "[v6]:port"). The port, when
// present, must be 1 to 5 digits; an empty host is an error.
func splitHostPort(s string) (host, port string, err error) {
	host = s
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", fmt.Errorf("unterminated IPv6 address")
		}
		host = s[:end+1]
		rest := s[end+1:]
		switch {
		case rest == "":
		case rest[0] == ':':
			port = rest[1:]
			if !validPort(port) {
				return "", "", fmt.Errorf("invalid port %q", port)
			}
		default:
			return "", "", fmt.Errorf("unexpected %q after IPv6 address", rest)
		}
		return host, port, nil
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
		if !validPort(port) {
			return "", "", fmt.Errorf("invalid port %q", port)
		}
	}
	if host == "" {
		return "", "", fmt.Errorf("empty host")
	}
	return host, port, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// checkHost validates a lower-case host: a bracketed IPv6 literal, or dot-
// separated non-empty labels of letters, digits, '-' and '_' (and '*' when
// wildcards are allowed).
func checkHost(host string, wildcards bool) error {
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || len(host) < 3 {
			return fmt.Errorf("invalid IPv6 host %q", host)
		}
		for i := 1; i < len(host)-1; i++ {
			c := host[i]
			if !(c == ':' || c == '.' || isHex(c)) {
				return fmt.Errorf("invalid IPv6 host %q", host)
			}
		}
		return nil
	}
	labelLen := 0
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c == '.':
			if labelLen == 0 {
				return fmt.Errorf("empty label in host %q", host)
			}
			labelLen = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '*' && wildcards:
		default:
			return fmt.Errorf("invalid character %q in host %q", c, host)
		}
		labelLen++
	}
	if labelLen == 0 {
		return fmt.Errorf("empty label in host %q", host)
	}
	return nil
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
}
