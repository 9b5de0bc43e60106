/** A response body as loosely typed JSON: tests assert on its shape. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function json(res: Response): Promise<any> {
  return res.json();
}
