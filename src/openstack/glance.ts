/** Glance (image API v2): create, show, list with filters (all pages), delete, image members, and waiting for an image. */
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

/** A project an image is shared with (visibility `shared`). */
export interface ImageMember {
  image_id: string;
  member_id: string;
  /** Only changes whether the image is listed for the member: a member may use it in any status. */
  status: 'pending' | 'accepted' | 'rejected';
  created_at: string;
  updated_at: string;
}

/** `POST /v2/images`: the record only (no data is uploaded). */
export interface CreateImageRequest {
  name?: string;
  visibility?: ImageVisibility;
  disk_format?: string;
  container_format?: string;
  min_disk?: number;
  min_ram?: number;
  tags?: string[];
  /** Free-form properties. */
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

  async createImage(request: CreateImageRequest, options: CallOptions = {}): Promise<Image> {
    return this.http.post<Image>('/images', request, options);
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

  /** The image's membership of one project; NotFoundError when the image is not shared with it. */
  async getImageMember(imageId: string, projectId: string, options: CallOptions = {}): Promise<ImageMember> {
    return this.http.get<ImageMember>(`/images/${seg(imageId)}/members/${seg(projectId)}`, undefined, options);
  }

  /** Shares a `shared` image with a project (by its owner; the member starts `pending`). */
  async addImageMember(imageId: string, projectId: string, options: CallOptions = {}): Promise<ImageMember> {
    return this.http.post<ImageMember>(`/images/${seg(imageId)}/members`, { member: projectId }, options);
  }

  /** Withdraws the share (by the image's owner). */
  async removeImageMember(imageId: string, projectId: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/images/${seg(imageId)}/members/${seg(projectId)}`, options);
  }

  /** The member project accepts, rejects (or resets to pending) a share. */
  async updateImageMember(imageId: string, projectId: string, status: ImageMember['status'], options: CallOptions = {}): Promise<ImageMember> {
    return this.http.put<ImageMember>(`/images/${seg(imageId)}/members/${seg(projectId)}`, { status }, options);
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
