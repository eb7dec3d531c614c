package registry

import "strings"

// permission is what a request needs, or what a user holds, on a repository.
type permission uint8

const (
	permNone permission = iota
	permRead
	permWrite // implies read
)

// rule is a compiled Repository.
type rule struct {
	public   bool
	allUsers bool
	readers  map[string]bool
	writers  map[string]bool
}

// accessTable answers who may do what on a repository. It is immutable
// after compile, so lookups take no lock.
type accessTable struct {
	exact    map[string]*rule
	prefixes map[string]*rule // keyed by the prefix without "/*"
	all      *rule            // the "*" rule, or nil
	pushers  map[string]bool
}

func compileAccess(c *Config) *accessTable {
	t := &accessTable{
		exact:    make(map[string]*rule),
		prefixes: make(map[string]*rule),
		pushers:  set(c.Pushers),
	}
	t.pushers[AdminUser] = true
	for _, r := range c.Repositories {
		cr := &rule{public: r.Public, allUsers: r.AllUsers, readers: set(r.Readers), writers: set(r.Writers)}
		switch name, prefix := strings.CutSuffix(r.Name, "/*"); {
		case r.Name == "*":
			t.all = cr
		case prefix:
			t.prefixes[name] = cr
		default:
			t.exact[name] = cr
		}
	}
	return t
}

// lookup returns the rule that governs repo, or nil when none does.
func (t *accessTable) lookup(repo string) *rule {
	if r, ok := t.exact[repo]; ok {
		return r
	}
	for p := repo; ; {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
		if r, ok := t.prefixes[p]; ok {
			return r
		}
	}
	return t.all
}

// public reports whether anyone may read repo without credentials.
func (t *accessTable) public(repo string) bool {
	r := t.lookup(repo)
	return r != nil && r.public
}

// permission returns what the authenticated user may do on repo.
func (t *accessTable) permission(user, repo string) permission {
	if t.pushers[user] {
		return permWrite
	}
	r := t.lookup(repo)
	switch {
	case r == nil:
		return permNone
	case r.writers[user]:
		return permWrite
	case r.public || r.allUsers || r.readers[user]:
		return permRead
	}
	return permNone
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
