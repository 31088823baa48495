//! The token store: one file, `$XDG_CONFIG_HOME/hookloop/mcp-oauth.json` (else
//! `~/.config/hookloop/mcp-oauth.json`), mode 0600, keyed by server URL, replaced atomically on
//! every write. Nothing else of the engine reads it: tokens never reach transcripts, logs or
//! child processes.
//!
//! Processes writing at once (a login while sessions refresh, runs side by side in CI) take
//! turns: each change is a read-modify-write of the whole file under an exclusive lock on
//! `mcp-oauth.json.lock` beside it (`flock`, which dies with its holder), so no process's
//! entry is lost. A process waits at most [`LOCK_WAIT`] for the lock.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{AuthError, AuthorizationMetadata, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};

use super::dpop::{DpopKey, DpopKeyError};
use crate::text::lock;

/// The file name under the config directory.
const FILE_NAME: &str = "mcp-oauth.json";
/// The store's format version; a file of another version is refused, not overwritten.
const FORMAT: u32 = 1;
/// The longest wait for another process's change of the file: a change takes milliseconds,
/// so this is a holder that hangs, and the change fails rather than wait for ever.
pub(super) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the token store could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Neither `XDG_CONFIG_HOME` nor `HOME` is set.
    #[error("no config directory: set XDG_CONFIG_HOME or HOME")]
    NoConfigDir,
    /// The file could not be read or written.
    #[error("token store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Another process held the store's lock for longer than 10 s (`LOCK_WAIT`).
    #[error("token store {path} is being changed by another process; gave up after {} s", LOCK_WAIT.as_secs())]
    Busy {
        /// The lock file.
        path: PathBuf,
    },
    /// The file is not a token store this version understands.
    #[error("token store {path} is unreadable: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// What the store keeps for one server.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct ServerTokens {
    /// rmcp's record: client id, token response, granted scopes, issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<StoredCredentials>,
    /// The secret that came with the client id (registration or configuration), needed to
    /// refresh with a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The authorization server's metadata at login: where to refresh, without discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<AuthorizationMetadata>,
    /// Every scope the server was asked for, a step-up's (`403 insufficient_scope`) included,
    /// even one a session could not run: the next login asks for them all, so that it gets what
    /// the server refused the last one for. Kept across logins; gone with a logout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_scopes: Vec<String>,
    /// The token of the server's configured grant (client credentials and the like), which
    /// has no login behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_token: Option<super::GrantToken>,
}

impl ServerTokens {
    /// Whether an access token is stored (it may have expired).
    pub fn has_token(&self) -> bool {
        self.credentials
            .as_ref()
            .is_some_and(|c| c.token_response.is_some())
    }
}

impl std::fmt::Debug for ServerTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of debug output (and so out of logs).
        f.debug_struct("ServerTokens")
            .field("credentials", &self.credentials)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "metadata",
                &self.metadata.as_ref().map(|m| &m.token_endpoint),
            )
            .field("requested_scopes", &self.requested_scopes)
            .field("grant_token", &self.grant_token)
            .finish()
    }
}

#[derive(Default, Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    #[serde(default)]
    servers: BTreeMap<String, ServerTokens>,
}

/// Where OAuth tokens live: the file, or memory for a process that must not touch the user's
/// files (the conformance client, tests). Cheap to clone; clones share the store.
#[derive(Clone, Debug)]
pub struct TokenStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
enum Backing {
    File(PathBuf),
    Memory(Mutex<BTreeMap<String, ServerTokens>>),
}

#[derive(Debug)]
struct Inner {
    backing: Backing,
    /// Serialises this process's read-modify-write cycles of the file.
    writing: Mutex<()>,
    /// The store's DPoP key, once needed.
    dpop: Mutex<Option<Arc<DpopKey>>>,
}

impl TokenStore {
    /// The store at `path`.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::with(Backing::File(path.into()))
    }

    /// A store that lives as long as the process.
    pub fn memory() -> Self {
        Self::with(Backing::Memory(Mutex::new(BTreeMap::new())))
    }

    fn with(backing: Backing) -> Self {
        Self {
            inner: Arc::new(Inner {
                backing,
                writing: Mutex::new(()),
                dpop: Mutex::new(None),
            }),
        }
    }

    /// `$XDG_CONFIG_HOME/hookloop/mcp-oauth.json`, else `$HOME/.config/hookloop/mcp-oauth.json`.
    pub fn default_path() -> Result<PathBuf, StoreError> {
        let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let config = match (nonempty("XDG_CONFIG_HOME"), nonempty("HOME")) {
            (Some(xdg), _) => PathBuf::from(xdg),
            (None, Some(home)) => PathBuf::from(home).join(".config"),
            (None, None) => return Err(StoreError::NoConfigDir),
        };
        Ok(config.join("hookloop").join(FILE_NAME))
    }

    /// Whether both handles share one store.
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The file, when the store is one.
    pub fn path(&self) -> Option<&Path> {
        match &self.inner.backing {
            Backing::File(path) => Some(path),
            Backing::Memory(_) => None,
        }
    }

    /// What is stored for the server at `url`.
    pub fn get(&self, url: &str) -> Result<Option<ServerTokens>, StoreError> {
        match &self.inner.backing {
            Backing::File(path) => Ok(read(path)?.servers.remove(url)),
            Backing::Memory(map) => Ok(lock(map).get(url).cloned()),
        }
    }

    /// Changes what is stored for `url` (`None` from `change` removes it).
    pub fn update(
        &self,
        url: &str,
        change: impl FnOnce(Option<ServerTokens>) -> Option<ServerTokens>,
    ) -> Result<(), StoreError> {
        let _writing = lock(&self.inner.writing);
        match &self.inner.backing {
            Backing::File(path) => {
                // Read, change and write under the lock: another process's change in between
                // would be lost.
                let _locked = lock_store(path)?;
                let mut file = read(path)?;
                let old = file.servers.remove(url);
                if let Some(new) = change(old) {
                    file.servers.insert(url.to_owned(), new);
                }
                file.version = FORMAT;
                write(path, &file)
            }
            Backing::Memory(map) => {
                let mut map = lock(map);
                let old = map.remove(url);
                if let Some(new) = change(old) {
                    map.insert(url.to_owned(), new);
                }
                Ok(())
            }
        }
    }

    /// Forgets the server at `url`; whether anything was stored.
    pub fn remove(&self, url: &str) -> Result<bool, StoreError> {
        let mut had = false;
        self.update(url, |old| {
            had = old.is_some();
            None
        })?;
        Ok(had)
    }

    /// Adds `scopes` to those asked of the server at `url` ([`ServerTokens::requested_scopes`]).
    pub fn remember_scopes(&self, url: &str, scopes: &[String]) -> Result<(), StoreError> {
        if scopes.is_empty() {
            return Ok(());
        }
        self.update(url, |old| {
            let mut entry = old.unwrap_or_default();
            union_into(&mut entry.requested_scopes, scopes);
            Some(entry)
        })
    }

    /// Forgets the login of the server at `url` (tokens, client, metadata) before a new one,
    /// keeping the scopes it was asked for, which the new login asks for again.
    pub fn forget_login(&self, url: &str) -> Result<(), StoreError> {
        self.update(url, |old| {
            let requested_scopes = old?.requested_scopes;
            (!requested_scopes.is_empty()).then(|| ServerTokens {
                requested_scopes,
                ..ServerTokens::default()
            })
        })
    }

    /// The store's DPoP key: the one beside the file (made on first use), or one held in
    /// memory for as long as a memory store lives.
    pub(super) fn dpop_key(&self) -> Result<Arc<DpopKey>, DpopKeyError> {
        let mut held = lock(&self.inner.dpop);
        if let Some(key) = &*held {
            return Ok(Arc::clone(key));
        }
        let key = Arc::new(match &self.inner.backing {
            Backing::File(path) => DpopKey::for_file_store(path)?,
            Backing::Memory(_) => DpopKey::generate().map_err(DpopKeyError::Generate)?.0,
        });
        *held = Some(Arc::clone(&key));
        Ok(key)
    }

    /// rmcp's view of one server's entry.
    pub(super) fn credentials(&self, url: &str, client_secret: Option<String>) -> Credentials {
        Credentials {
            store: self.clone(),
            url: url.to_owned(),
            client_secret,
        }
    }
}

/// The lock beside the store at `path`, taken within [`LOCK_WAIT`].
fn lock_store(path: &Path) -> Result<crate::private::FileLock, StoreError> {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    let lock = path.with_file_name(name);
    match crate::private::lock_exclusive(&lock, LOCK_WAIT) {
        Ok(Some(held)) => Ok(held),
        Ok(None) => Err(StoreError::Busy { path: lock }),
        Err(source) => Err(StoreError::Io { path: lock, source }),
    }
}

fn read(path: &Path) -> Result<StoreFile, StoreError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(StoreFile {
                version: FORMAT,
                ..StoreFile::default()
            });
        }
        Err(source) => {
            return Err(StoreError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let file: StoreFile = serde_json::from_str(&text).map_err(|e| StoreError::Invalid {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    if file.version != FORMAT {
        return Err(StoreError::Invalid {
            path: path.to_owned(),
            reason: format!(
                "format version {} (this hookloop reads {FORMAT})",
                file.version
            ),
        });
    }
    Ok(file)
}

/// Writes a sibling temporary file, mode 0600 from its creation, and renames it over the
/// store: a crash leaves the old file or the new one, never a mix, and the tokens are never
/// readable by others, not even for a moment.
fn write(path: &Path, file: &StoreFile) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::private::create_dir(dir).map_err(io)?;
    let text = serde_json::to_vec_pretty(file).map_err(|e| io(std::io::Error::other(e)))?;
    // Unique to this write: two handles of one file in one process each have a name of their
    // own (the lock keeps them apart too).
    let tmp = dir.join(format!(
        ".{FILE_NAME}.{}.{:016x}.tmp",
        std::process::id(),
        fastrand::u64(..)
    ));
    let written = (|| {
        let mut out = crate::private::create_file(&tmp)?;
        out.write_all(&text)?;
        out.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io)
}

/// One server's entry as rmcp's [`CredentialStore`].
pub(super) struct Credentials {
    store: TokenStore,
    url: String,
    /// Written with the credentials when set (a fresh registration); else the stored one stays.
    client_secret: Option<String>,
}

impl Credentials {
    fn backend(error: StoreError) -> AuthError {
        AuthError::CredentialStoreError(error.to_string())
    }
}

#[async_trait::async_trait]
impl CredentialStore for Credentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self
            .store
            .get(&self.url)
            .map_err(Self::backend)?
            .and_then(|entry| entry.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let secret = self.client_secret.clone();
        self.store
            .update(&self.url, |old| {
                let mut entry = old.unwrap_or_default();
                entry.credentials = Some(credentials);
                if secret.is_some() {
                    entry.client_secret = secret;
                }
                Some(entry)
            })
            .map_err(Self::backend)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store.remove(&self.url).map_err(Self::backend)?;
        Ok(())
    }

    /// A refresh token the server refused is worthless: drop the tokens (the client id stays),
    /// so `hookloop mcp list` shows the server as needing a login.
    async fn on_refresh_token_rejected(
        &self,
        rejected: &StoredCredentials,
    ) -> Result<(), AuthError> {
        let rejected_token = rejected
            .token_response
            .as_ref()
            .map(|t| rmcp_token(t).to_owned());
        self.store
            .update(&self.url, |old| {
                let mut entry = old?;
                let current = entry
                    .credentials
                    .as_ref()
                    .and_then(|c| c.token_response.as_ref())
                    .map(rmcp_token);
                // A login since the refresh started replaced the tokens: keep the new ones.
                if current == rejected_token.as_deref()
                    && let Some(credentials) = &mut entry.credentials
                {
                    credentials.token_response = None;
                }
                Some(entry)
            })
            .map_err(Self::backend)
    }
}

/// Appends to `scopes` each of `more` it lacks, in order.
pub(super) fn union_into(scopes: &mut Vec<String>, more: &[String]) {
    for scope in more {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
}

/// The access token of a token response.
pub(super) fn rmcp_token(response: &rmcp::transport::auth::OAuthTokenResponse) -> &str {
    use oauth2::TokenResponse;
    response.access_token().secret()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(token: &str) -> StoredCredentials {
        let response: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(
            serde_json::json!({"access_token": token, "token_type": "Bearer", "expires_in": 60}),
        )
        .unwrap();
        StoredCredentials::new("client".into(), Some(response), vec!["a".into()], Some(1))
    }

    #[test]
    fn the_file_is_private_and_keyed_by_url() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempdir();
        let path = dir.join("sub").join(FILE_NAME);
        let store = TokenStore::file(&path);
        store
            .update("http://a/mcp", |_| {
                Some(ServerTokens {
                    credentials: Some(credentials("t-a")),
                    client_secret: Some("s".into()),
                    ..ServerTokens::default()
                })
            })
            .unwrap();
        store
            .update("http://b/mcp", |_| {
                Some(ServerTokens {
                    credentials: Some(credentials("t-b")),
                    ..ServerTokens::default()
                })
            })
            .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let a = store.get("http://a/mcp").unwrap().unwrap();
        assert_eq!(
            rmcp_token(a.credentials.unwrap().token_response.as_ref().unwrap()),
            "t-a"
        );
        assert_eq!(a.client_secret.as_deref(), Some("s"));
        assert!(store.remove("http://a/mcp").unwrap());
        assert!(store.get("http://a/mcp").unwrap().is_none());
        assert!(store.get("http://b/mcp").unwrap().unwrap().has_token());
        // No temporary file is left beside it; the lock file stays, empty.
        let mut names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                std::ffi::OsString::from(FILE_NAME),
                std::ffi::OsString::from(format!("{FILE_NAME}.lock"))
            ]
        );
    }

    #[test]
    fn a_file_of_another_version_is_refused_and_left_alone() {
        let dir = tempdir();
        let path = dir.join(FILE_NAME);
        std::fs::write(&path, r#"{"version": 9, "servers": {}}"#).unwrap();
        let store = TokenStore::file(&path);
        let error = store.update("http://a/mcp", |_| None).unwrap_err();
        assert!(error.to_string().contains("version 9"), "{error}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"version": 9, "servers": {}}"#
        );
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let entry = ServerTokens {
            credentials: Some(credentials("very-secret-token")),
            client_secret: Some("very-secret-client".into()),
            ..ServerTokens::default()
        };
        let shown = format!("{entry:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
    }

    #[test]
    fn a_new_login_keeps_the_requested_scopes_and_a_logout_forgets_them() {
        let store = TokenStore::file(tempdir().join(FILE_NAME));
        let url = "http://a/mcp";
        store
            .update(url, |_| {
                Some(ServerTokens {
                    credentials: Some(credentials("t-a")),
                    ..ServerTokens::default()
                })
            })
            .unwrap();
        store
            .remember_scopes(url, &["a".into(), "b".into()])
            .unwrap();
        store
            .remember_scopes(url, &["b".into(), "c".into()])
            .unwrap();
        store.forget_login(url).unwrap();
        let entry = store.get(url).unwrap().unwrap();
        assert!(!entry.has_token());
        assert_eq!(entry.requested_scopes, ["a", "b", "c"]);
        assert!(store.remove(url).unwrap());
        assert!(store.get(url).unwrap().is_none());
    }

    #[test]
    fn an_entry_written_before_requested_scopes_existed_still_reads() {
        let path = tempdir().join(FILE_NAME);
        let old = r#"{"version": 1, "servers": {"http://a/mcp": {"client_secret": "s"}}}"#;
        std::fs::write(&path, old).unwrap();
        let entry = TokenStore::file(&path)
            .get("http://a/mcp")
            .unwrap()
            .unwrap();
        assert!(entry.requested_scopes.is_empty());
        assert_eq!(entry.client_secret.as_deref(), Some("s"));
    }

    #[test]
    fn handles_of_one_file_in_many_threads_lose_no_entry() {
        let path = tempdir().join(FILE_NAME);
        let writers: Vec<_> = (0..16)
            .map(|i| {
                // A handle of its own: no in-process mutex is shared, as between processes.
                let store = TokenStore::file(&path);
                std::thread::spawn(move || {
                    store
                        .update(&format!("http://s{i}/mcp"), |_| {
                            Some(ServerTokens {
                                client_secret: Some(format!("s{i}")),
                                ..ServerTokens::default()
                            })
                        })
                        .unwrap();
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let store = TokenStore::file(&path);
        for i in 0..16 {
            let entry = store.get(&format!("http://s{i}/mcp")).unwrap();
            assert!(entry.is_some(), "entry {i} was lost");
        }
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hookloop-store-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
