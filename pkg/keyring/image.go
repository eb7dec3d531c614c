package keyring

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/imageref"
)

// Image is an image reference as credentials are matched against it: its
// normalized name, the kubelet's look-up key (the name
// parsers.ParseImageName gives, distribution/reference's
// ParseNormalizedNamed(image).Name()), split as the kubelet's
// URLsMatchStr splits it, and the registry its credentials are hashed
// for.
type Image struct {
	// Registry is the registry a credential found for the image is
	// hashed for (credential.Hasher.Hash): the name's registry host and
	// port, lower case, Docker Hub's aliases folded into "docker.io".
	// It plays no part in matching.
	Registry string
	// Repository is the name's path after the registry, such as
	// "library/alpine" for "alpine", as distribution/reference gives it.
	Repository string

	name   string // "docker.io/library/alpine"
	host   string // the registry host as the kubelet splits it off its port
	port   string // "" when the name has no port
	labels int    // number of '.'-separated labels of host; 0 when net/url rejects the host
	hub    bool   // the kubelet's isDefaultRegistryMatch(name)
}

// Host returns the registry host as the kubelet's SplitURL gives it:
// without its port, "::1" for "[::1]:5000", the registry as written
// ("[::1]", "Reg.Example") when it names no port.
func (im Image) Host() string { return im.host }

// Port returns the registry port, or "" when the reference names none.
func (im Image) Port() string { return im.port }

// Domain returns the registry as the normalized name spells it (host and
// port, case kept): what the kubelet files a plugin's Registry-keyed
// answer under.
func (im Image) Domain() string { return im.name[:len(im.name)-len(im.Repository)-1] }

// Name returns the normalized name, such as "docker.io/library/alpine":
// what the kubelet looks credentials up for and asks credential provider
// plugins about. The registry keeps its case.
func (im Image) Name() string { return im.name }

// String returns Name.
func (im Image) String() string { return im.name }

// DockerHub reports whether the kubelet takes the image for a Docker Hub
// image when no key of a keyring matched it (isDefaultRegistryMatch): its
// registry is "docker.io", or holds neither '.' nor ':' ("localhost",
// "LocalHost"). Such an image gets the credentials filed under the key
// "index.docker.io".
func (im Image) DockerHub() bool { return im.hub }

// ParseImage parses an image reference with the kubelet's grammar
// (imageref.Parse, that of distribution/reference): what the kubelet
// rejects is an error wrapping ErrInvalidImage and imageref.ErrInvalid,
// with the kubelet's reason. It does not allocate for a name that needs
// no rewriting.
func ParseImage(image string) (Image, error) {
	ref, err := imageref.Parse(image)
	if err != nil {
		return Image{}, fmt.Errorf("%w: %w", ErrInvalidImage, err)
	}
	domain, repo, _ := strings.Cut(ref.Name, "/")
	im := Image{
		Registry:   credential.NormalizeRegistry(domain), // no allocation when already lower case
		Repository: repo,
		name:       ref.Name,
		host:       domain,
		hub:        domain == dockerHub || domain == legacyDockerHub || !strings.ContainsAny(domain, ".:"),
	}
	// net.SplitHostPort, as the kubelet's SplitURL calls it, on the
	// grammar's hosts: "host:port" and "[v6]:port" split, anything else
	// ("host", "[v6]") is kept whole with no port.
	if i := strings.LastIndexByte(domain, ':'); i >= 0 && i > strings.LastIndexByte(domain, ']') {
		im.host, im.port = strings.TrimSuffix(strings.TrimPrefix(domain[:i], "["), "]"), domain[i+1:]
	}
	im.labels = strings.Count(im.host, ".") + 1
	if domain[0] == '[' {
		// The kubelet parses "https://" + name with net/url, which wants
		// a valid IP address between the brackets; distribution/reference
		// takes any hex digits and colons ("[A]", "[::1::2]"). Where
		// net/url fails, no key matches the image (labels 0: no pattern
		// has as few). The Docker Hub fallback still applies, as in the
		// kubelet.
		if _, err := url.Parse("https://" + domain); err != nil {
			im.labels = 0
		}
	}
	return im, nil
}

// ImageRegistry returns the registry (host[:port]) a credential found for
// an image reference is hashed for: "docker.io" for Docker Hub images,
// lower case otherwise (Image.Registry). It is the one to pass to
// credential.Hasher.Hash.
func ImageRegistry(image string) (string, error) {
	im, err := ParseImage(image)
	if err != nil {
		return "", err
	}
	return im.Registry, nil
}

// Docker Hub's names.
const (
	// dockerHub is the registry of Docker Hub images in normalized names.
	dockerHub = "docker.io"
	// legacyDockerHub is the kubelet's defaultRegistryHost: the key whose
	// credentials a Docker Hub image gets when no key matched it (the
	// kubelet files "https://index.docker.io/v1/" under it).
	legacyDockerHub = "index.docker.io"
)
