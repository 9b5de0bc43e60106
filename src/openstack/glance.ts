/** Glance (image API v2): show, list with filters (all pages), delete, and waiting for an image. */
import { NotFoundError } from './errors';
import { type CallOptions, type QueryParams, ServiceHttp, type Session, seg } from './http';
import { pollUntil } from './wait';

export type ImageStatus = 'queued' | 'saving' | 'uploading' | 'importing' | 'active' | 'killed' | 'deleted' | 'pending_delete' | 'deactivated';
export type ImageVisibility = 'public' | 'private' | 'shared' | 'community';

export interface Image {
  id: string;
  name: string | null;
  status: ImageStatus;
  visibility: ImageVisibility;
  owner: string | null;
  protected: boolean;
  os_hidden?: boolean;
  disk_format: string | null;
  container_format: string | null;
  size: number | null;
  virtual_size: number | null;
  checksum: string | null;
  min_ram: number;
  min_disk: number;
  tags: string[];
  created_at: string;
  updated_at: string;
  self: string;
  file: string;
  schema: string;
  /** Free-form properties: Nova's snapshots carry `image_type: snapshot`, `instance_uuid`, … */
  [property: string]: unknown;
}

export interface ListImagesFilters {
  name?: string;
  status?: ImageStatus;
  visibility?: ImageVisibility | 'all';
  owner?: string;
  /** Images having all of these tags. */
  tag?: string[];
  member_status?: 'accepted' | 'pending' | 'rejected' | 'all';
  os_hidden?: boolean;
  /** Page size; the client follows the pages to the end. */
  limit?: number;
  sort?: string;
}

export class GlanceClient {
  readonly http: ServiceHttp;

  constructor(session: Session) {
    this.http = new ServiceHttp('image', session, { versionPath: '/v2' });
  }

  async getImage(id: string, options: CallOptions = {}): Promise<Image> {
    return this.http.get<Image>(`/images/${seg(id)}`, undefined, options);
  }

  async listImages(filters: ListImagesFilters = {}, options: CallOptions = {}): Promise<Image[]> {
    const query: Record<string, QueryParams[string]> = { ...filters };
    const images: Image[] = [];
    let marker: string | undefined;
    for (let page = 0; page < 10_000; page++) {
      const body = await this.http.get<{ images: Image[]; next?: string }>('/images', { ...query, marker }, options);
      images.push(...body.images);
      const next = body.next === undefined ? undefined : (new URL(body.next, 'http://glance.invalid').searchParams.get('marker') ?? undefined);
      if (next === undefined || body.images.length === 0 || next === marker) break;
      marker = next;
    }
    return images;
  }

  async deleteImage(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/images/${seg(id)}`, options);
  }

  /**
   * Polls until the image record exists and `predicate` accepts it (default: any status). Nova's
   * fake-driver snapshots stay `queued`, so waiting for the record is what tests can do.
   */
  async waitForImage(
    id: string,
    predicate: (image: Image) => boolean = () => true,
    options: { timeoutMs?: number; intervalMs?: number; signal?: AbortSignal } = {},
  ): Promise<Image> {
    const image = await pollUntil(
      async () => {
        try {
          return await this.getImage(id, { signal: options.signal });
        } catch (error) {
          if (error instanceof NotFoundError) return undefined;
          throw error;
        }
      },
      (value) => value !== undefined && predicate(value),
      {
        timeoutMs: options.timeoutMs ?? 60_000,
        intervalMs: options.intervalMs ?? 500,
        what: `image ${id}`,
        signal: options.signal,
        failed: (value) => (value?.status === 'killed' ? 'went to killed' : undefined),
      },
    );
    return image as Image;
  }
}
