import type { ErrorBody } from "./types.js";

/**
 * An error answer of the API: `status` is the HTTP status, `code` and
 * `message` come from its body ({"error":{"code","message"}}), which
 * `body` holds as sent. An answer whose body is not the API's error shape
 * (a proxy's page, say) has code "http_error", its text as the message
 * and `body` undefined.
 */
export class ApiError extends Error {
  override readonly name = "ApiError";
  readonly status: number;
  readonly code: string;
  readonly body: ErrorBody | undefined;
  /** Retry-After in seconds, when the answer sent one (429, 503). */
  readonly retryAfter: number | undefined;

  constructor(status: number, code: string, message: string, body?: ErrorBody, retryAfter?: number) {
    super(`${message} (HTTP ${status} ${code})`);
    this.status = status;
    this.code = code;
    this.body = body;
    this.retryAfter = retryAfter;
  }

  /** Reads an error answer (status >= 400) into an ApiError. */
  static async fromResponse(res: Response): Promise<ApiError> {
    const text = await res.text().catch(() => "");
    let body: ErrorBody | undefined;
    try {
      const parsed: unknown = JSON.parse(text);
      if (isErrorBody(parsed)) body = parsed;
    } catch {
      // not JSON: the text is the message
    }
    const ra = res.headers.get("retry-after");
    const retryAfter = ra !== null && /^\d+$/.test(ra) ? Number(ra) : undefined;
    if (body) return new ApiError(res.status, body.error.code, body.error.message, body, retryAfter);
    return new ApiError(res.status, "http_error", text.trim() || res.statusText, undefined, retryAfter);
  }
}

function isErrorBody(v: unknown): v is ErrorBody {
  if (typeof v !== "object" || v === null) return false;
  const e = (v as { error?: unknown }).error;
  return typeof e === "object" && e !== null && typeof (e as { code?: unknown }).code === "string" &&
    typeof (e as { message?: unknown }).message === "string";
}

/** Reports whether err is an ApiError with status 404. */
export function isNotFound(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404;
}
