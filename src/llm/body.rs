//! A request body as a list of pieces, some of them shared with the encoding cache, so that
//! sending a long history costs no copy of it: the pieces go to the socket as they are, in one
//! vectored write, and the body says its length up front, so the request carries the same
//! `content-length` and bytes as a body in one piece.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

/// The bytes of one request body, in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct RequestBody {
    pieces: Vec<Bytes>,
    len: usize,
}

impl RequestBody {
    /// The body's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The body in one piece (a copy when it has several).
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for piece in &self.pieces {
            out.extend_from_slice(piece);
        }
        out
    }

    /// The body for one attempt: the pieces are shared, not copied.
    pub(crate) fn to_reqwest(&self) -> reqwest::Body {
        match self.pieces.as_slice() {
            [] => reqwest::Body::from(Bytes::new()),
            [one] => reqwest::Body::from(one.clone()),
            _ => reqwest::Body::wrap(Pieces {
                left: self.pieces.iter().cloned().collect(),
                len: self.len as u64,
            }),
        }
    }
}

impl From<Vec<u8>> for RequestBody {
    fn from(bytes: Vec<u8>) -> Self {
        let mut body = Self::default();
        body.push(Bytes::from(bytes));
        body
    }
}

impl RequestBody {
    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }
}

/// Shows the body as text, for trace logs. Pieces split the JSON between tokens, so each is
/// text of its own.
impl fmt::Display for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in &self.pieces {
            f.write_str(&String::from_utf8_lossy(piece))?;
        }
        Ok(())
    }
}

/// Writes a [`RequestBody`]: bytes of its own, with shared pieces between them.
#[derive(Debug, Default)]
pub(crate) struct BodyWriter {
    body: RequestBody,
    /// What is being written after the last piece.
    open: Vec<u8>,
}

impl BodyWriter {
    /// The buffer the next bytes of the body are written to.
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.open
    }

    /// Appends a shared piece.
    pub(crate) fn push_shared(&mut self, piece: Bytes) {
        self.seal();
        self.body.push(piece);
    }

    /// How many pieces the body holds so far, for [`truncate`](Self::truncate).
    pub(crate) fn mark(&self) -> (usize, usize) {
        (self.body.pieces.len(), self.open.len())
    }

    /// Drops what was written since `mark`.
    pub(crate) fn truncate(&mut self, (pieces, open): (usize, usize)) {
        if self.body.pieces.len() > pieces {
            // Bytes open at the mark were sealed into the first piece after it: they stay.
            let kept = self.body.pieces[pieces].slice(..open);
            let dropped: usize = self.body.pieces[pieces..].iter().map(Bytes::len).sum();
            self.body.pieces.truncate(pieces);
            self.body.len -= dropped;
            self.open.clear();
            self.open.extend_from_slice(&kept);
        }
        self.open.truncate(open);
    }

    /// Replaces the trailing comma of a list of elements, if any, with the list's closing
    /// bracket; the comma may end a shared piece, which is then shared one byte shorter.
    pub(crate) fn close_list(&mut self) {
        if self.open.is_empty()
            && let Some(last) = self.body.pieces.last_mut()
            && last.last() == Some(&b',')
        {
            *last = last.slice(..last.len() - 1);
            self.body.len -= 1;
        } else if self.open.last() == Some(&b',') {
            self.open.pop();
        }
        self.open.push(b']');
    }

    /// The body written.
    pub(crate) fn finish(mut self) -> RequestBody {
        self.seal();
        self.body
    }

    fn seal(&mut self) {
        if !self.open.is_empty() {
            let open = std::mem::take(&mut self.open);
            self.body.push(Bytes::from(open));
        }
    }
}

/// A body of several pieces as hyper sends it: its exact length first, so the request says
/// `content-length` as for a body in one piece, then each piece as it is.
struct Pieces {
    left: VecDeque<Bytes>,
    len: u64,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.left.pop_front();
        if let Some(piece) = &next {
            self.len -= piece.len() as u64;
        }
        Poll::Ready(next.map(|piece| Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.left.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut BodyWriter)) -> (RequestBody, String) {
        let mut writer = BodyWriter::default();
        f(&mut writer);
        let body = writer.finish();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(body.len(), text.len());
        assert_eq!(body.to_string(), text);
        (body, text)
    }

    #[test]
    fn a_list_closes_on_a_comma_in_its_own_bytes_or_at_the_end_of_a_shared_piece() {
        let (body, text) = written(|w| {
            w.buf().extend_from_slice(b"[");
            w.push_shared(Bytes::from_static(b"1,2,"));
            w.close_list();
        });
        assert_eq!(text, "[1,2]");
        assert_eq!(body.pieces.len(), 3);
        let (_, text) = written(|w| {
            w.push_shared(Bytes::from_static(b"[1,"));
            w.buf().extend_from_slice(b"2,");
            w.close_list();
        });
        assert_eq!(text, "[1,2]");
        let (_, text) = written(|w| {
            w.buf().extend_from_slice(b"[");
            w.close_list();
        });
        assert_eq!(text, "[]");
    }

    #[test]
    fn truncating_to_a_mark_drops_shared_pieces_and_bytes_written_since() {
        let (_, text) = written(|w| {
            w.buf().extend_from_slice(b"{\"a\":[");
            let mark = w.mark();
            w.push_shared(Bytes::from_static(b"1,"));
            w.buf().extend_from_slice(b"2,");
            w.truncate(mark);
            w.buf().extend_from_slice(b"3,");
            w.close_list();
            w.buf().push(b'}');
        });
        assert_eq!(text, "{\"a\":[3]}");
        let (_, text) = written(|w| {
            w.buf().extend_from_slice(b"[0,");
            let mark = w.mark();
            w.buf().extend_from_slice(b"1,");
            w.truncate(mark);
            w.close_list();
        });
        assert_eq!(text, "[0]");
    }

    #[tokio::test]
    async fn a_body_of_pieces_states_its_exact_length_and_yields_every_piece() {
        use http_body_util::BodyExt;
        let (body, text) = written(|w| {
            w.buf().extend_from_slice(b"{\"m\":[");
            w.push_shared(Bytes::from_static(b"1,"));
            w.buf().extend_from_slice(b"2");
            w.close_list();
            w.buf().push(b'}');
        });
        let sent = body.to_reqwest();
        assert_eq!(
            http_body::Body::size_hint(&sent).exact(),
            Some(text.len() as u64)
        );
        let collected = sent.collect().await.unwrap().to_bytes();
        assert_eq!(collected, text.as_bytes());
    }
}
