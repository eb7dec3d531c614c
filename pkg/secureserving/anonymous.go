package secureserving

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
)

type authenticatorRequest = authenticator.Request

// anonymousOnlyOn narrows delegate, the options' authenticator, which
// takes every request without credentials for system:anonymous (upstream's
// DelegatingAuthenticationOptions enable anonymous requests and ignore
// their Anonymous field), to anonymous requests on the paths that
// authorization always allows (matched as the authorizer matches them:
// exact, or a prefix ending in "*"). Elsewhere such a request is not
// authenticated: 401, without a SubjectAccessReview for
// system:anonymous, as the issue of a scrape without a token asks.
func anonymousOnlyOn(delegate authenticator.Request, paths []string) (authenticator.Request, error) {
	allow, err := path.NewAuthorizer(paths)
	if err != nil {
		return nil, err
	}
	return &anonymousOnly{delegate: delegate, paths: allow}, nil
}

type anonymousOnly struct {
	delegate authenticator.Request
	paths    authorizer.Authorizer
}

var _ authenticator.Request = (*anonymousOnly)(nil)

func (a *anonymousOnly) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := a.delegate.AuthenticateRequest(req)
	if err != nil || !ok || resp.User.GetName() != user.Anonymous {
		return resp, ok, err
	}
	d, _, _ := a.paths.Authorize(req.Context(), authorizer.AttributesRecord{Path: req.URL.Path})
	if d != authorizer.DecisionAllow {
		return nil, false, nil
	}
	return resp, ok, err
}
