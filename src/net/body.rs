//! Bounded reads of an HTTP answer's body: a peer's body is read only up to a cap, whatever its
//! headers say, so a server that sends without end cannot grow memory without bound.

/// Why a body was not read whole.
#[derive(Debug)]
pub(crate) enum Unread {
    /// The body (as declared, or as it arrived) is at least this many bytes, over the cap; the
    /// rest was not read.
    TooLarge {
        /// What the body came to when it was refused, in bytes (the providers say it; OAuth's
        /// messages name the cap only).
        #[cfg_attr(not(feature = "providers"), allow(dead_code))]
        at_least: u64,
    },
    /// The transfer broke.
    Broken(reqwest::Error),
}

/// The whole body, refused past `cap` bytes without reading the rest: at once when the
/// declared length is over it, else as soon as what arrived is.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, Unread> {
    let declared = response.content_length();
    if let Some(len) = declared.filter(|&len| len > cap as u64) {
        return Err(Unread::TooLarge { at_least: len });
    }
    let mut body = Vec::with_capacity(declared.map_or(0, |len| len as usize));
    while let Some(chunk) = response.chunk().await.map_err(Unread::Broken)? {
        if body.len() + chunk.len() > cap {
            return Err(Unread::TooLarge {
                at_least: (body.len() + chunk.len()) as u64,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Up to `cap` bytes of an answer's body; whatever arrived if the transfer breaks, since what
/// the answer's status says is still worth reporting.
pub(crate) async fn read_prefix(mut response: reqwest::Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}
