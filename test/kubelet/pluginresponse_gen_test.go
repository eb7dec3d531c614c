package kubelet

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The answer generator: each member of a CredentialProviderResponse is
// mostly right and sometimes wrong in one of the ways a plugin can be
// (missing, in another case, twice, of another JSON type, another value),
// auth maps hold keys that match the case's image and keys that are odd
// (globs, paths, ports, schemes, empty, not UTF-8, escaped duplicates)
// with values of every shape, unknown members carry nested garbage and
// huge numbers, and now and then the whole document is broken.

// member is one raw JSON object member.
type member struct{ key, value string }

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// typeMember is apiVersion or kind: right (most often) or wrong.
func typeMember(r *rand.Rand, name, right string, wrong ...string) []member {
	q := `"` + name + `"`
	switch r.IntN(40) {
	case 0:
		return nil
	case 1:
		return []member{{`"` + strings.ToUpper(name[:1]) + name[1:] + `"`, `"` + right + `"`}}
	case 2:
		return []member{{q, pick(r, "7", "null", "true", `["`+right+`"]`, `{}`)}}
	case 3:
		return []member{{q, `"` + pick(r, wrong...) + `"`}, {q, `"` + right + `"`}}
	case 4:
		return []member{{q, `"` + right + `"`}, {q, `"` + right + `"`}}
	case 5, 6:
		return []member{{q, `"` + pick(r, wrong...) + `"`}}
	}
	return []member{{q, `"` + right + `"`}}
}

// durations are cacheDuration values: valid (zero, negative, short,
// long, the longest), and not.
var durations = []string{
	`"0"`, `"0s"`, `"-1s"`, `"-1h"`, `"1h"`, `"10m"`, `"90m"`, `"1h30m"`, `"+2h"`, `"2562047h"`, `"1.5h"`,
	`".5h"`, `"1ms"`, `"1ns"`, `"72h"`, `"1h0m0.5s"`, `"-0"`,
	`"2562048h"`, `"1e3h"`, `"PT1H"`, `"1 h"`, `" 1h"`, `""`, `"5"`, `"1d"`, `"\u0031h"`, `3600`, `true`, `{}`, `null`,
}

// authKeys match the case's image host (c<n>.p<m>.test, image path
// team/app) in several ways, or not, or are odd.
var genAuthKeys = []string{
	"*.*.test", "*.*.test", "*.*.test/team", "*.*.test/team/app", "*.*.test/other", "*.*.test:5000", "https://*.*.test",
	"c*.*.test", "d*.*.test", "*.p*.test", "*.test", "*", "", "*.*.TEST", "*.*.test/team/", "*.*.test/te", "http://*.*.test/v2/team",
	"\xff.test", "ü.*.test", `\u002a.*.test`, `*.*.t\u0065st`, "[a.test", "*.*.test?x", "*.*.test#f", "*.*.test/%74eam", " *.*.test",
}

func authValue(r *rand.Rand, n, i int) (string, string) {
	pw := fmt.Sprintf("pw-%d-%d", n, i)
	user := fmt.Sprintf("u%d-%d", n, i)
	switch r.IntN(64) {
	case 0:
		return `{}`, ""
	case 1:
		return `null`, ""
	case 2:
		return `{"username":"` + user + `"}`, ""
	case 3:
		return `{"password":"` + pw + `"}`, pw
	case 4:
		return `{"username":"","password":""}`, ""
	case 5:
		return `{"Username":"` + user + `","password":"` + pw + `"}`, pw
	case 6:
		return `{"username":"` + user + `","password":"` + pw + `","auth":"dTpw"}`, pw
	case 7:
		return `{"username":5,"password":"` + pw + `"}`, pw
	case 8:
		return pick(r, `"`+pw+`"`, `[]`, `7`, `true`), pw
	case 9:
		return `{"username":"` + user + `","username":"x","password":"` + pw + `"}`, pw
	case 10:
		return `{"username":"` + user + `","password":"` + pw + `\u0000\"\xff"}`, pw
	case 11:
		return `{"username":null,"password":"` + pw + `"}`, pw
	}
	return `{"username":"` + user + `","password":"` + pw + `"}`, pw
}

func authMember(r *rand.Rand, n int) (members []member, secrets []string) {
	switch r.IntN(20) {
	case 0:
		return nil, nil
	case 1:
		return []member{{`"auth"`, `null`}}, nil
	case 2:
		return []member{{`"auth"`, pick(r, `[]`, `"x"`, `7`)}}, nil
	case 3:
		return []member{{`"Auth"`, `{}`}}, nil
	}
	var b strings.Builder
	b.WriteByte('{')
	seen := map[string]bool{}
	for i := range r.IntN(5) {
		key := pick(r, genAuthKeys...)
		if seen[key] && r.IntN(4) != 0 {
			continue // mostly unique keys, sometimes one twice
		}
		seen[key] = true
		v, pw := authValue(r, n, i)
		if pw != "" {
			secrets = append(secrets, pw)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + key + `":` + v)
	}
	b.WriteByte('}')
	members = []member{{`"auth"`, b.String()}}
	if r.IntN(40) == 0 {
		members = append(members, member{`"auth"`, `{}`})
	}
	return members, secrets
}

var extras = []member{
	{`"future"`, `true`}, {`"metadata"`, `{}`}, {`"n"`, `1e999`}, {`"n"`, `-123456789012345678901234567890`},
	{`"nested"`, `{"a":[{"b":[[[{"c":null}]]]}],"d":"\xff"}`}, {`"status"`, `null`}, {`"apiversion"`, `"credentialprovider.kubelet.k8s.io/v1"`},
	{`"cachekeytype"`, `"Image"`}, {`"cacheDuration "`, `"1h"`}, {`""`, `""`}, {`"\u0061uth"`, `{}`},
}

// randomResponse draws a case.
func randomResponse(r *rand.Rand, n int) responseCase {
	c := responseCase{
		apiVersion:   pick(r, responseAPIVersions...),
		defaultCache: pick(r, time.Duration(0), time.Hour),
	}
	var ms []member
	ms = append(ms, typeMember(r, "apiVersion", c.apiVersion,
		"credentialprovider.kubelet.k8s.io/v2", "credentialprovider.kubelet.k8s.io/V1", "v1", "credentialprovider.kubelet.k8s.io",
		"/credentialprovider.kubelet.k8s.io/v1", pick(r, responseAPIVersions...), "kubelet.config.k8s.io/v1")...)
	ms = append(ms, typeMember(r, "kind", "CredentialProviderResponse",
		"CredentialProviderRequest", "credentialproviderresponse", "", "CredentialProviderConfig", "Secret")...)
	switch r.IntN(14) {
	case 0:
	case 1:
		ms = append(ms, member{`"cacheKeyType"`, pick(r, `"image"`, `"REGISTRY"`, `""`, `"Repository"`, `null`, `1`, `"Image "`)})
	case 2:
		ms = append(ms, member{`"cacheKeyType"`, `"Image"`}, member{`"cacheKeyType"`, `"Global"`})
	default:
		ms = append(ms, member{`"cacheKeyType"`, pick(r, `"Image"`, `"Registry"`, `"Global"`)})
	}
	if r.IntN(3) > 0 {
		d := durations[r.IntN(17)] // valid
		if r.IntN(6) == 0 {
			d = pick(r, durations...)
		}
		ms = append(ms, member{`"cacheDuration"`, d})
	}
	auth, secrets := authMember(r, n)
	ms = append(ms, auth...)
	c.secrets = secrets
	if r.IntN(8) == 0 {
		ms = append(ms, pick(r, extras...))
	}
	if r.IntN(3) == 0 {
		r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	}
	space := pick(r, "", "", " ", "\n", "\t", "\r\n  ")
	var b strings.Builder
	b.WriteString(pick(r, "", "", "", " ", "\n"))
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(space + m.key + space + ":" + space + m.value)
	}
	b.WriteString(space + "}" + pick(r, "", "\n", "\n", " \n "))
	body := b.String()
	if r.IntN(20) == 0 {
		switch r.IntN(7) {
		case 0:
			body = body[:r.IntN(len(body))]
		case 1:
			body += pick(r, "x", "{}", "\x00", `"`, "]")
		case 2:
			body = "\ufeff" + body
		case 3:
			body = "[" + body + "]"
		case 4:
			body = pick(r, "null", "", " ", "{}", `""`, "0")
		case 5:
			i := r.IntN(len(body) + 1)
			body = body[:i] + "\xff" + body[i:]
		case 6:
			body = strings.ReplaceAll(body, `"`, `'`)
		}
	}
	c.body = []byte(body)
	return c
}
