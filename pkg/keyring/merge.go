package keyring

import (
	"context"
	"errors"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Merge returns a keyring that asks each of krs in argument order and
// returns their candidates in that order, as the kubelet's
// UnionDockerKeyring does: all of the first keyring's candidates (in its
// own order), then the second's, and so on. A pod's keyring is
// Merge(pull secrets, node, credential provider plugins). Nothing is left
// out: a credential that two keyrings hold is returned twice, as the
// kubelet returns (and tries) it twice.
//
// A keyring's error does not stop the others: Lookup returns every
// candidate found together with the errors joined. An image that does not
// parse is an error wrapping ErrInvalidImage and asks no keyring. Nil
// keyrings are ignored.
func Merge(krs ...Keyring) Keyring {
	var flat merged
	for _, kr := range krs {
		switch kr := kr.(type) {
		case nil:
		case merged:
			flat = append(flat, kr...)
		default:
			flat = append(flat, kr)
		}
	}
	return flat
}

type merged []Keyring

var _ Keyring = merged(nil)

// Lookup implements Keyring.
func (m merged) Lookup(ctx context.Context, image string) ([]credential.Credential, error) {
	im, err := ParseImage(image)
	if err != nil {
		return nil, err
	}
	var (
		stack [hitsOnStack]hit
		errs  []error
	)
	hits := stack[:0]
	for _, kr := range m {
		if sk, ok := kr.(*Static); ok {
			hits = sk.lookup(hits, im) // parsed once, no allocation
			continue
		}
		found, err := kr.Lookup(ctx, image)
		if err != nil {
			errs = append(errs, err)
		}
		if len(found) > 0 {
			hits = append(hits, hit{other: found})
		}
	}
	return buildCandidates(hits, im), errors.Join(errs...)
}
