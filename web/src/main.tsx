/**
 * The calendar page: sign in (noauth project picker or Keystone token), then the calendar
 * (`#/`) or one lease (`#/leases/<id>`). Built with Preact (small, kept, React's model) and our own
 * canvas timeline (1,000 host rows paint as fast as 30).
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { Credentials } from './api';
import { CalendarView } from './calendar-view';
import { LeasePage } from './lease-page';

interface Settings {
  auth_strategy: 'noauth' | 'keystone';
}

const STORAGE_KEY = 'leasekeeper.credentials';

function storedCredentials(): Credentials | undefined {
  try {
    const stored = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? 'null') as Credentials | null;
    return stored ?? undefined;
  } catch {
    return undefined;
  }
}

function useHashRoute(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const changed = () => setHash(location.hash);
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return hash;
}

function SignIn(props: { settings: Settings; current?: Credentials; onChange(c: Credentials | undefined): void }) {
  const noauth = props.settings.auth_strategy === 'noauth';
  const [projectId, setProjectId] = useState(props.current?.kind === 'noauth' ? props.current.projectId : 'demo');
  const [admin, setAdmin] = useState(props.current?.kind === 'noauth' ? props.current.admin : false);
  const [token, setToken] = useState('');
  if (props.current) {
    const who = props.current.kind === 'noauth' ? `project ${props.current.projectId}${props.current.admin ? ' (admin)' : ''}` : 'your Keystone token';
    return (
      <div class="signin">
        <span>
          Signed in as <strong>{who}</strong>
        </span>
        <button type="button" onClick={() => props.onChange(undefined)}>
          Switch
        </button>
      </div>
    );
  }
  return (
    <form
      class="signin"
      aria-label="Sign in"
      onSubmit={(e) => {
        e.preventDefault();
        if (noauth && projectId.trim()) props.onChange({ kind: 'noauth', projectId: projectId.trim(), admin });
        if (!noauth && token.trim()) props.onChange({ kind: 'token', token: token.trim() });
      }}
    >
      {noauth ? (
        <>
          <label>
            Project <input name="project" value={projectId} maxLength={64} required onInput={(e) => setProjectId(e.currentTarget.value)} />
          </label>
          <label>
            <input type="checkbox" name="admin" checked={admin} onChange={(e) => setAdmin(e.currentTarget.checked)} /> admin
          </label>
          <span class="hint">development sign-in (noauth)</span>
        </>
      ) : (
        <label>
          Keystone token <input name="token" type="password" autoComplete="off" value={token} required onInput={(e) => setToken(e.currentTarget.value)} />
          <span class="hint">
            from <code>openstack token issue -f value -c id</code>
          </span>
        </label>
      )}
      <button type="submit">Sign in</button>
    </form>
  );
}

function App() {
  const [settings, setSettings] = useState<Settings>();
  const [problem, setProblem] = useState<string>();
  const [credentials, setCredentials] = useState<Credentials | undefined>(storedCredentials);
  const hash = useHashRoute();
  useEffect(() => {
    fetch('settings')
      .then((r) => r.json() as Promise<Settings>)
      .then(setSettings, (err: unknown) => setProblem(`cannot reach the API: ${String(err)}`));
  }, []);
  const change = (c: Credentials | undefined) => {
    if (c) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(c));
    else sessionStorage.removeItem(STORAGE_KEY);
    setCredentials(c);
  };
  const leaseId = /^#\/leases\/([0-9a-f-]{36})$/i.exec(hash)?.[1];
  return (
    <>
      <header class="top">
        <h1>
          <a href="#/">leasekeeper</a> <span>calendar</span>
        </h1>
        {settings && <SignIn settings={settings} current={credentials} onChange={change} />}
      </header>
      <main>
        {problem && <p role="alert">{problem}</p>}
        {!credentials && settings && <p class="intro">Sign in to see the hosts, their leases and when what you need is free.</p>}
        {credentials && (leaseId ? <LeasePage credentials={credentials} leaseId={leaseId} /> : <CalendarView credentials={credentials} />)}
      </main>
    </>
  );
}

const root = document.getElementById('app')!;
root.textContent = ''; // the "Loading…" placeholder
render(<App />, root);
