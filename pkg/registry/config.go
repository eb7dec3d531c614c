package registry

import (
	"errors"
	"fmt"
	"strings"
)

// Config declares the registry's users and who may read and write which
// repository. The zero Config is a registry that only its administrator
// (Push, Copy) can use.
type Config struct {
	// Users are the accounts Basic auth accepts.
	Users []User
	// Repositories are the access rules; see Repository.Name for how a
	// rule is chosen for a repository.
	Repositories []Repository
	// Pushers name users that may read and push to every repository.
	Pushers []string
}

// User is one account. Exactly one of Password and PasswordHash is set.
type User struct {
	// Name is the user name; it must not be empty, contain a colon or
	// equal AdminUser.
	Name string
	// Password is the plaintext password. New hashes it with bcrypt and
	// keeps only the hash.
	Password string
	// PasswordHash is a bcrypt hash, as `htpasswd -B` writes it.
	PasswordHash string
}

// Repository is an access rule for one repository or a set of them.
type Repository struct {
	// Name is an exact repository name ("team-a/app"), a prefix rule
	// ending in "/*" ("team-a/*", every repository below team-a/ at any
	// depth), or "*" (every repository). For a repository the exact rule
	// wins, then the longest matching prefix rule, then "*"; rules are
	// not combined.
	Name string
	// Public lets anyone, without credentials, read.
	Public bool
	// AllUsers lets every authenticated user read.
	AllUsers bool
	// Readers name users that may read (pull).
	Readers []string
	// Writers name users that may read and push.
	Writers []string
}

// AdminUser is the name of the registry's built-in administrator, the
// identity Push and Copy authenticate as. Its password is random, made by
// New and never leaves the process.
const AdminUser = "pullguard-admin"

// ErrInvalidConfig is wrapped by every error New returns for a Config it
// cannot accept.
var ErrInvalidConfig = errors.New("invalid registry config")

// validate checks c and returns the first problem it finds.
func (c *Config) validate() error {
	users := make(map[string]bool, len(c.Users))
	for i, u := range c.Users {
		switch {
		case u.Name == "":
			return fmt.Errorf("%w: users[%d]: empty name", ErrInvalidConfig, i)
		case strings.ContainsAny(u.Name, ":\x00"):
			return fmt.Errorf("%w: user %q: name contains a colon", ErrInvalidConfig, u.Name)
		case u.Name == AdminUser:
			return fmt.Errorf("%w: user %q: name is reserved for the built-in administrator", ErrInvalidConfig, u.Name)
		case users[u.Name]:
			return fmt.Errorf("%w: user %q: defined twice", ErrInvalidConfig, u.Name)
		case (u.Password == "") == (u.PasswordHash == ""):
			return fmt.Errorf("%w: user %q: set exactly one of password and password hash", ErrInvalidConfig, u.Name)
		}
		users[u.Name] = true
	}
	known := func(field string, names []string) error {
		for _, n := range names {
			if !users[n] {
				return fmt.Errorf("%w: %s: unknown user %q", ErrInvalidConfig, field, n)
			}
		}
		return nil
	}
	if err := known("pushers", c.Pushers); err != nil {
		return err
	}
	rules := make(map[string]bool, len(c.Repositories))
	for i, r := range c.Repositories {
		if err := validatePattern(r.Name); err != nil {
			return fmt.Errorf("%w: repositories[%d]: %w", ErrInvalidConfig, i, err)
		}
		if rules[r.Name] {
			return fmt.Errorf("%w: repository rule %q: defined twice", ErrInvalidConfig, r.Name)
		}
		rules[r.Name] = true
		if err := known(fmt.Sprintf("repository rule %q: readers", r.Name), r.Readers); err != nil {
			return err
		}
		if err := known(fmt.Sprintf("repository rule %q: writers", r.Name), r.Writers); err != nil {
			return err
		}
	}
	return nil
}

// validatePattern checks a Repository.Name.
func validatePattern(p string) error {
	if p == "*" {
		return nil
	}
	name, prefix := strings.CutSuffix(p, "/*")
	if err := validateRepoName(name); err != nil {
		if prefix {
			return fmt.Errorf("prefix rule %q: %w", p, err)
		}
		return fmt.Errorf("rule %q: %w", p, err)
	}
	return nil
}

// validateRepoName checks a repository name against the distribution
// grammar: slash-separated components of lowercase letters and digits,
// joined inside a component by ".", "_", "__" or runs of "-".
func validateRepoName(name string) error {
	if name == "" {
		return errors.New("empty repository name")
	}
	if len(name) > 255 {
		return fmt.Errorf("repository name longer than 255 characters")
	}
	for _, c := range strings.Split(name, "/") {
		if !validComponent(c) {
			return fmt.Errorf("invalid repository name component %q", c)
		}
	}
	return nil
}

func validComponent(c string) bool {
	if c == "" || !alnum(c[0]) || !alnum(c[len(c)-1]) {
		return false
	}
	for i := 1; i < len(c); {
		if alnum(c[i]) {
			i++
			continue
		}
		// A separator: ".", "_", "__" or one or more "-", then alnum.
		j := i
		switch c[i] {
		case '.':
			j++
		case '_':
			j++
			if j < len(c) && c[j] == '_' {
				j++
			}
		case '-':
			for j < len(c) && c[j] == '-' {
				j++
			}
		default:
			return false
		}
		if j >= len(c) || !alnum(c[j]) {
			return false
		}
		i = j
	}
	return true
}

func alnum(b byte) bool { return 'a' <= b && b <= 'z' || '0' <= b && b <= '9' }
