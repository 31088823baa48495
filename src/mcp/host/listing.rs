//! One listing of a server's tools, page by page, within caps: a server decides how many pages
//! it sends and how big they are, so the host stops past the session's tool limit, a byte
//! budget, a page count or a deadline, whichever comes first, instead of following
//! `nextCursor` for as long as the server likes.

use std::future::Future;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{ListToolsResult, Tool};

use crate::mcp::convert::json_len;

/// Pages one listing may take. A server that pages a few tools at a time still fits; one
/// whose cursors never end is stopped here if no other cap stops it first.
pub(crate) const MAX_LIST_PAGES: usize = 128;

/// Bytes of tool definitions (their JSON) one listing may bring, across its pages. Well above
/// what [`HostOptions::max_tools`](crate::mcp::HostOptions::max_tools) tools need once their
/// descriptions and schemas are cut to the catalog's caps.
pub(crate) const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;

/// Why a listing stopped without a tool list.
#[derive(Debug, thiserror::Error)]
pub(super) enum ListError {
    /// The server refused a page, or the connection broke.
    #[error("tools/list failed: {0}")]
    Failed(#[from] ServiceError),
    /// More tools than the whole session may have.
    #[error("it lists more than {max} tools, the session's limit")]
    TooManyTools { max: usize },
    /// Pages past the byte budget.
    #[error("its tool list is over {MAX_LIST_BYTES} bytes")]
    TooManyBytes,
    /// Pages past the page cap.
    #[error("its tool list runs past {MAX_LIST_PAGES} pages")]
    TooManyPages,
    /// The listing outlasted its deadline.
    #[error("listing its tools took more than {secs} s")]
    TimedOut { secs: u64 },
}

/// Lists every page `page` gives (called with each `nextCursor`, `None` first), within the
/// caps: at most `max_tools` tools, [`MAX_LIST_BYTES`], [`MAX_LIST_PAGES`], and `deadline`.
pub(super) async fn list_tools<F, Fut>(
    mut page: F,
    max_tools: usize,
    deadline: Duration,
) -> Result<Vec<Tool>, ListError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<ListToolsResult, ServiceError>>,
{
    let pages = async {
        let mut tools = Vec::new();
        let mut bytes = 0usize;
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let result = page(cursor).await?;
            bytes = bytes.saturating_add(result.tools.iter().map(json_len).sum());
            if bytes > MAX_LIST_BYTES {
                return Err(ListError::TooManyBytes);
            }
            tools.extend(result.tools);
            if tools.len() > max_tools {
                return Err(ListError::TooManyTools { max: max_tools });
            }
            match result.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(ListError::TooManyPages)
    };
    tokio::time::timeout(deadline, pages)
        .await
        .unwrap_or(Err(ListError::TimedOut {
            secs: deadline.as_secs(),
        }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rmcp::model::JsonObject;

    use super::*;

    fn tool(name: String, description: String) -> Tool {
        Tool::new(name, description, Arc::new(JsonObject::new()))
    }

    /// Pages of `per_page` tools with `description_bytes` descriptions and a fresh cursor each.
    fn endless(
        per_page: usize,
        description_bytes: usize,
        asked: &AtomicUsize,
    ) -> impl FnMut(Option<String>) -> std::future::Ready<Result<ListToolsResult, ServiceError>> + '_
    {
        move |_| {
            let n = asked.fetch_add(1, Ordering::Relaxed);
            let tools = (0..per_page)
                .map(|i| tool(format!("t{n}_{i}"), "d".repeat(description_bytes)))
                .collect();
            let mut page = ListToolsResult::with_all_items(tools);
            page.next_cursor = Some(format!("{}", n + 1));
            std::future::ready(Ok(page))
        }
    }

    #[tokio::test]
    async fn endless_empty_pages_stop_at_the_page_cap() {
        let asked = AtomicUsize::new(0);
        let result = list_tools(endless(0, 0, &asked), 256, Duration::from_secs(30)).await;
        assert!(matches!(result, Err(ListError::TooManyPages)), "{result:?}");
        assert_eq!(asked.load(Ordering::Relaxed), MAX_LIST_PAGES);
    }

    #[tokio::test]
    async fn pages_of_many_tools_stop_just_past_the_tool_cap() {
        let asked = AtomicUsize::new(0);
        let result = list_tools(endless(100, 10, &asked), 256, Duration::from_secs(30)).await;
        assert!(
            matches!(result, Err(ListError::TooManyTools { max: 256 })),
            "{result:?}"
        );
        assert_eq!(asked.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn big_pages_stop_at_the_byte_budget() {
        let asked = AtomicUsize::new(0);
        // 1 MiB a page in 16 tools: the tool cap alone would allow 16 pages.
        let result = list_tools(endless(16, 64 * 1024, &asked), 256, Duration::from_secs(30)).await;
        assert!(matches!(result, Err(ListError::TooManyBytes)), "{result:?}");
        // Each page is a little over 1 MiB of JSON: the budget runs out at its eighth.
        assert_eq!(
            asked.load(Ordering::Relaxed),
            MAX_LIST_BYTES / (1024 * 1024)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_listing_that_never_ends_stops_at_its_deadline() {
        let never = |_| std::future::pending::<Result<ListToolsResult, ServiceError>>();
        let result = list_tools(never, 256, Duration::from_secs(5)).await;
        assert!(
            matches!(result, Err(ListError::TimedOut { secs: 5 })),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_last_page_without_a_cursor_ends_the_listing() {
        let pages = |cursor: Option<String>| {
            let mut page = ListToolsResult::with_all_items(vec![tool(
                format!("t{}", cursor.as_deref().unwrap_or("0")),
                String::new(),
            )]);
            page.next_cursor = cursor.is_none().then(|| "1".to_owned());
            std::future::ready(Ok(page))
        };
        let tools = list_tools(pages, 256, Duration::from_secs(30))
            .await
            .unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["t0", "t1"]);
    }
}
