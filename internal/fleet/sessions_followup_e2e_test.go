package fleet_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/wire"
)

// reviewTurns reviews a pull request in one reply, and answers a comment
// on it from the review its prompt carries.
func reviewTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	last := r.Messages[len(r.Messages)-1].Content
	if strings.Contains(last, " replied on #") {
		b, _ := json.Marshal(r.Messages[:len(r.Messages)-1])
		if strings.Contains(string(b), "LGTM, once the retry has a bound") {
			return "As I said in the review: LGTM, once the retry has a bound.", usage, nil
		}
		return "I have no review to go on.", usage, nil
	}
	return "LGTM, once the retry has a bound.", usage, nil
}

// The README's follow-up: a comment on a pull request lands in the
// session its review opened (one session per pull request, from both
// triggers' templates), and its run answers from the review its prompt
// carries.
func TestFleetPullRequestCommentContinuesTheReview(t *testing.T) {
	f := setupFleetWith(t, fleetOptions{responder: reviewTurns, workers: 1})
	review, err := f.tenant.CreateTrigger(f.ctx, wire.TriggerRequest{
		Name: new("pr-review"), Scheme: new("github"), Events: &[]string{"pull_request.opened"},
		Message:   new("Review pull request #{{.payload.number}} of {{.payload.repository.full_name}}: {{.payload.pull_request.title}}"),
		SessionID: new("{{slug .payload.repository.full_name}}-pr-{{.payload.number}}"),
	})
	require.NoError(t, err)
	comments, err := f.tenant.CreateTrigger(f.ctx, wire.TriggerRequest{
		Name: new("pr-comments"), Scheme: new("github"), Events: &[]string{"issue_comment.created"},
		Message:   new("{{.payload.comment.user.login}} replied on #{{.payload.issue.number}}: {{.payload.comment.body}}"),
		SessionID: new("{{slug .payload.repository.full_name}}-pr-{{.payload.issue.number}}"),
	})
	require.NoError(t, err)
	hooks := apiClient(t, f.dispatcher.URL(), "")

	opened := []byte(`{"action":"opened","number":7,"pull_request":{"title":"Fix the flaky test"},"repository":{"full_name":"acme/web"}}`)
	res := sendHook(t, hooks, review, review.Secret, "d-1", "pull_request", opened)
	require.Equal(t, http.StatusAccepted, res.Status)
	first := f.wait(res.Answer.RunID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, first.Status, first.Error)
	require.Equal(t, "acme-web-pr-7", first.SessionID)

	comment := []byte(`{"action":"created","issue":{"number":7,"pull_request":{}},"comment":{"body":"Why the bound?","user":{"login":"octocat"}},"repository":{"full_name":"acme/web"}}`)
	res = sendHook(t, hooks, comments, comments.Secret, "d-2", "issue_comment", comment)
	require.Equal(t, http.StatusAccepted, res.Status)
	second := f.wait(res.Answer.RunID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, second.Status, second.Error)
	require.Equal(t, "acme-web-pr-7", second.SessionID)
	require.JSONEq(t, `"As I said in the review: LGTM, once the retry has a bound."`, string(second.Answer))

	got := f.model.Received()
	b, err := json.Marshal(got[len(got)-1].Messages)
	require.NoError(t, err)
	require.Contains(t, string(b), "Review pull request #7 of acme/web: Fix the flaky test", "the review's message is in the reply's prompt")

	// Another pull request's comment starts its own session.
	other := []byte(`{"action":"created","issue":{"number":8,"pull_request":{}},"comment":{"body":"Hello?","user":{"login":"octocat"}},"repository":{"full_name":"acme/web"}}`)
	res = sendHook(t, hooks, comments, comments.Secret, "d-3", "issue_comment", other)
	require.Equal(t, http.StatusAccepted, res.Status)
	third := f.wait(res.Answer.RunID, 30*time.Second)
	require.Equal(t, "acme-web-pr-8", third.SessionID)
	require.JSONEq(t, `"I have no review to go on."`, string(third.Answer))
}
