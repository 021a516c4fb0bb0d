package loop_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
)

const ordersSpec = `openapi: 3.0.3
info: {title: orders, version: "1"}
servers: [{url: "https://orders.example.com"}]
paths:
  /orders/{id}:
    get:
      operationId: getOrder
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
`

// An agent's OpenAPI module is declared in its prompt in one line, before
// the limits line; an agent without modules has the prompt it had.
func TestSystemPromptDeclaresOpenAPIModules(t *testing.T) {
	t.Parallel()
	sb := pool(t)
	eng, err := loop.New(loop.Config{Model: llm.NewScripted(), Sandbox: sb})
	require.NoError(t, err)
	persona := "You handle orders."
	plain := eng.SystemPrompt(agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Persona: persona}})
	require.Equal(t, loop.SystemPrompt(persona, sb.Declarations(nil, false), true), plain, "no modules: the prompt as before")

	spec, _ := json.Marshal(ordersSpec)
	withMod := eng.SystemPrompt(agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Persona: persona,
		OpenAPI: []agentfleet.OpenAPIModule{{Name: "orders", Spec: spec}}}})
	line := "declare function require(m: 'api:orders'): {getOrder(p: {id: string}): Res};"
	require.Contains(t, withMod, line)
	require.Less(t, strings.Index(withMod, line), strings.Index(withMod, "// Limits per turn"), "the limits line stays last")
	t.Logf("prompt without modules %d chars, with one 1-operation module %d", len(plain), len(withMod))
	require.Less(t, len(withMod)-len(plain), 250)
	// The engine caches prompts per agent shape: the plain one is unchanged.
	require.Equal(t, plain, eng.SystemPrompt(agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Persona: persona}}))
}
