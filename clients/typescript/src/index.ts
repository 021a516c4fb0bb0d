/**
 * @agentfleet/client: the TypeScript client of agentfleet's HTTP API.
 * Types are generated from the OpenAPI document (internal/api/openapi.json)
 * into schema.ts; the client is hand-written over fetch and has no
 * runtime dependencies.
 */
export { Client, Runs, Batches, Approvals, Sessions, Skills, type ClientOptions, type CallOptions } from "./client.js";
export { ApiError, isNotFound } from "./errors.js";
export { readSSE, followRunEvents, EventDecodeError, type SSEMessage, type EventsOptions, type OpenStream } from "./sse.js";
export type * from "./types.js";
export type { components, operations, paths } from "./schema.js";
