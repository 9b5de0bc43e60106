/**
 * A resource type's parameters are parsed once, by its schema at the API, and its hooks get that
 * value typed: a schema whose transform is not idempotent (it appends "!" and counts its runs)
 * shows whether anything between the API and the hooks parsed them again.
 */
import { z } from 'zod';
import type { FitSearch, ResourcePlugin } from '../src/domain/resource-plugin';
import { apiClient, useTestStack } from '../dev-stack/stack';

let parses = 0;
const exclaimedParams = z.strictObject({
  word: z
    .string()
    .max(20)
    .transform((word) => {
      parses++;
      return { text: `${word}!`, length: word.length };
    }),
});
type ExclaimedParams = z.output<typeof exclaimedParams>;

/** What each hook saw of the parameters: typed, so `text` and `length` are read without a parse. */
const seen: string[] = [];

const exclaimed: ResourcePlugin<ExclaimedParams> = {
  resourceType: 'test:exclaimed',
  paramsSchema: exclaimedParams,
  earliest({ reservations, startMs }): Promise<FitSearch> {
    for (const { params } of reservations) seen.push(`earliest ${params.word.text} ${params.word.length}`);
    return Promise.resolve({ earliest: startMs, longestMs: Infinity, cutShort: false, tried: 1 });
  },
  reserve(ctx) {
    const { text, length } = ctx.reservation.params.word;
    seen.push(`reserve ${text} ${length}`);
    return Promise.resolve({ allocation: { said: text }, resourceKeys: [] });
  },
  end(ctx) {
    seen.push(`end ${ctx.reservation.params.word.text}`);
    return Promise.resolve({});
  },
};

describe('typed parameters', () => {
  const stack = useTestStack({ plugins: [exclaimed] });
  const api = apiClient(() => stack().url);

  it('reach every hook as the API parsed them, once', async () => {
    const body = { start_date: '2099-04-01 10:00', end_date: '2099-04-01 11:00', reservations: [{ resource_type: 'test:exclaimed', word: 'hello' }] };
    const search = await api('POST', '/v1/availability/search', body);
    expect(search.status).toBe(200);
    expect([seen, parses]).toEqual([['earliest hello! 5'], 1]);

    const created = await api('POST', '/v1/leases', { name: 'exclaimed', ...body });
    expect(created.status).toBe(201);
    expect(created.body.lease.reservations[0]).toMatchObject({ said: 'hello!' });
    expect((await api('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
    // The reserve and end hooks ran in the worker on the stored value: no parse besides the API's two.
    expect([seen, parses]).toEqual([['earliest hello! 5', 'reserve hello! 5', 'end hello!'], 2]);
  });
});
