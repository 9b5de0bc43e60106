/**
 * The calendar page: sign in (noauth project picker or Keystone token), then the calendar
 * (`#/`) or one lease (`#/leases/<id>`). Built with Preact (small, kept, React's model) and our own
 * canvas timeline (1,000 host rows paint as fast as 30).
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, type Credentials } from './api';
import { WaitingForApproval } from './approvals';
import { CalendarView } from './calendar-view';
import { LeasePage } from './lease-page';

interface Settings {
  auth_strategy: 'noauth' | 'keystone';
  /** noauth: the development admin's project (what the blazar CLI acts in without headers). */
  default_project_id?: string;
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

/** Keystone: a password sign-in through the API (POST /calendar/login), or a pasted token. */
function KeystoneSignIn(props: { onChange(c: Credentials): void }) {
  const [fields, setFields] = useState({ username: '', password: '', project_name: '', user_domain_name: 'Default', project_domain_name: 'Default' });
  const [token, setToken] = useState('');
  const [problem, setProblem] = useState<string>();
  const field = (name: keyof typeof fields, label: string, type = 'text') => (
    <label>
      {label} <input name={name} type={type} value={fields[name]} required maxLength={255} autoComplete={type === 'password' ? 'current-password' : 'off'} onInput={(e) => setFields({ ...fields, [name]: e.currentTarget.value })} />
    </label>
  );
  async function login(event: Event) {
    event.preventDefault();
    setProblem(undefined);
    try {
      const answer = await call<{ token: string }>({ kind: 'token', token: '' }, 'POST', 'login', fields);
      props.onChange({ kind: 'token', token: answer.token });
    } catch (err) {
      setProblem(err instanceof ApiFailure ? err.message : String(err));
    }
  }
  return (
    <div class="signin">
      <form aria-label="Sign in with Keystone" onSubmit={(e) => void login(e)}>
        {field('username', 'User')}
        {field('password', 'Password', 'password')}
        {field('project_name', 'Project')}
        {field('user_domain_name', 'User domain')}
        {field('project_domain_name', 'Project domain')}
        <button type="submit">Sign in</button>
      </form>
      <form
        aria-label="Sign in with a token"
        onSubmit={(e) => {
          e.preventDefault();
          if (token.trim()) props.onChange({ kind: 'token', token: token.trim() });
        }}
      >
        <label>
          or a token <input name="token" type="password" autoComplete="off" value={token} required onInput={(e) => setToken(e.currentTarget.value)} />
        </label>
        <span class="hint">
          (<code>openstack token issue -f value -c id</code>)
        </span>
        <button type="submit">Use the token</button>
      </form>
      {problem && (
        <p role="alert" class="signin-problem">
          {problem}
        </p>
      )}
    </div>
  );
}

function SignIn(props: { settings: Settings; current?: Credentials; onChange(c: Credentials | undefined): void }) {
  const [projectId, setProjectId] = useState(props.current?.kind === 'noauth' ? props.current.projectId : (props.settings.default_project_id ?? 'admin'));
  const [admin, setAdmin] = useState(props.current?.kind === 'noauth' ? props.current.admin : true);
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
  if (props.settings.auth_strategy === 'keystone') return <KeystoneSignIn onChange={(c) => props.onChange(c)} />;
  return (
    <form
      class="signin"
      aria-label="Sign in"
      onSubmit={(e) => {
        e.preventDefault();
        if (projectId.trim()) props.onChange({ kind: 'noauth', projectId: projectId.trim(), admin });
      }}
    >
      <label>
        Project <input name="project" value={projectId} maxLength={64} required onInput={(e) => setProjectId(e.currentTarget.value)} />
      </label>
      <label>
        <input type="checkbox" name="admin" checked={admin} onChange={(e) => setAdmin(e.currentTarget.checked)} /> admin
      </label>
      <span class="hint">development sign-in (noauth)</span>
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
        {credentials &&
          (leaseId ? (
            <LeasePage credentials={credentials} leaseId={leaseId} />
          ) : (
            <>
              <WaitingForApproval credentials={credentials} />
              <CalendarView credentials={credentials} />
            </>
          ))}
      </main>
    </>
  );
}

const root = document.getElementById('app')!;
root.textContent = ''; // the "Loading…" placeholder
render(<App />, root);
