/** A response body as loosely typed JSON: tests assert on its shape. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function json(res: Response): Promise<any> {
  return res.json();
}

/**
 * Every answer carries its request id in `x-openstack-request-id`, and an error body the same id in
 * `request_id`: checked here for every call the tests make, then taken out of the body, so that
 * tests compare Blazar's error body as it is.
 */
export function withoutRequestId(res: Response, body: unknown): unknown {
  const header = res.headers.get('x-openstack-request-id');
  if (!header || !/^req-[0-9a-f-]{36}$/.test(header)) throw new Error(`${res.url}: no request id in x-openstack-request-id (got ${String(header)})`);
  if (res.status < 400 || typeof body !== 'object' || body === null || !('error_code' in body)) return body;
  const { request_id: requestId, ...rest } = body as { request_id?: unknown };
  if (requestId !== header) throw new Error(`${res.url}: the error body's request_id ${String(requestId)} is not the request's ${header}`);
  return rest;
}

/** An API answer's JSON, its request id checked and taken out of an error body (see withoutRequestId). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function apiJson(res: Response): Promise<any> {
  return withoutRequestId(res, await res.json());
}
