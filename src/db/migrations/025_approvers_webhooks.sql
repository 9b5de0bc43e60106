-- A project's approvers' webhook (issue 42), beside its own webhooks and delivered, signed, guarded
-- and counted as they are: `audience` says who set it and who hears it. 'project': the project's
-- list (members set it); 'approvers': at most one per project, set by admins, hearing only the
-- approval notices of the project's leases (its `events`), besides LK_APPROVERS_WEBHOOK_URL.
ALTER TABLE project_webhooks
  ADD COLUMN audience text NOT NULL DEFAULT 'project' CHECK (audience IN ('project', 'approvers'));
-- The same URL may be both a project's webhook and its approvers' (two entries, two secrets).
ALTER TABLE project_webhooks DROP CONSTRAINT project_webhooks_project_id_url_key;
ALTER TABLE project_webhooks ADD CONSTRAINT project_webhooks_project_id_audience_url_key UNIQUE (project_id, audience, url);
CREATE UNIQUE INDEX project_webhooks_one_approvers ON project_webhooks (project_id) WHERE audience = 'approvers';
