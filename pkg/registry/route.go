package registry

import (
	"net/http"
	"strings"
)

// Kind classifies a request by the part of the distribution API it uses.
type Kind string

// The request kinds. The zero Kind matches every kind in a Filter.
const (
	// KindBase is the API version check, /v2/.
	KindBase Kind = "base"
	// KindManifest is /v2/<name>/manifests/<reference>.
	KindManifest Kind = "manifest"
	// KindBlob is /v2/<name>/blobs/<digest>: a layer or config read (or
	// delete).
	KindBlob Kind = "blob"
	// KindUpload is /v2/<name>/blobs/uploads/...: a blob upload session.
	KindUpload Kind = "upload"
	// KindTags is /v2/<name>/tags/list.
	KindTags Kind = "tags"
	// KindCatalog is /v2/_catalog.
	KindCatalog Kind = "catalog"
	// KindOther is every other path, inside /v2/ or not.
	KindOther Kind = "other"
)

// route is a parsed request path.
type route struct {
	kind Kind
	// repo is the repository name; empty for base, catalog and other.
	repo string
	// ref is the tag or digest of a manifest, the digest of a blob or the
	// id of an upload session.
	ref string
	// api reports whether the path is under /v2.
	api bool
	// badName reports a repository path whose name breaks the grammar.
	badName bool
}

// parseRoute classifies an URL path the way the distribution API lays it
// out, looking from the end as repository names may hold slashes.
func parseRoute(path string) route {
	switch {
	case path == "/v2" || path == "/v2/":
		return route{kind: KindBase, api: true}
	case path == "/v2/_catalog":
		return route{kind: KindCatalog, api: true}
	case !strings.HasPrefix(path, "/v2/"):
		return route{kind: KindOther}
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(path, "/v2/"), "/")
	elem := strings.Split(rest, "/")
	n := len(elem)
	r := route{kind: KindOther, api: true}
	var nameElems int
	switch {
	case n >= 4 && elem[n-3] == "blobs" && elem[n-2] == "uploads":
		r.kind, r.ref, nameElems = KindUpload, elem[n-1], n-3
	case n >= 3 && elem[n-2] == "blobs" && elem[n-1] == "uploads":
		r.kind, nameElems = KindUpload, n-2
	case n >= 3 && elem[n-2] == "blobs":
		r.kind, r.ref, nameElems = KindBlob, elem[n-1], n-2
	case n >= 3 && elem[n-2] == "manifests":
		r.kind, r.ref, nameElems = KindManifest, elem[n-1], n-2
	case n >= 3 && elem[n-2] == "tags" && elem[n-1] == "list":
		r.kind, nameElems = KindTags, n-2
	default:
		return r
	}
	r.repo = strings.Join(elem[:nameElems], "/")
	if validateRepoName(r.repo) != nil {
		r.badName = true
	}
	return r
}

// need returns the permission a request on a repository needs: reads for
// GET and HEAD of manifests, blobs and tags, writes for everything else
// (uploads, pushes, deletes).
func (r route) need(method string) permission {
	if r.kind == KindUpload {
		return permWrite
	}
	if method == http.MethodGet || method == http.MethodHead {
		return permRead
	}
	return permWrite
}
