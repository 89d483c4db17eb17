//! A small MCP server on stdio for the end-to-end tests (tests/e2e/mcp.rs): tools `echo`
//! (returns its `text`), `add` (returns `a + b`) and `crash` (the server exits mid-call, so a
//! test can crash it while a call waits for its answer).
//!
//! With `FIXTURE_STARTED=PATH` it appends a line to PATH when it starts, and with
//! `FIXTURE_CALLS=PATH` one line per call, so a test can prove whether GEODE started it and
//! called it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

fn append(var: &str, line: &str) {
    if let Some(path) = std::env::var_os(var) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        panic!("schema literal is an object")
    };
    Tool::new(name, description, Arc::new(schema))
}

#[derive(Clone)]
struct Fixture;

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "echo",
                "Return the text.",
                json!({"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]}),
            ),
            tool(
                "add",
                "Add two numbers.",
                json!({"type": "object",
                       "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}),
            ),
            tool(
                "crash",
                "Exit the server without answering.",
                json!({"type": "object", "properties": {}}),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        append(
            "FIXTURE_CALLS",
            &format!("{} {}", request.name, Value::Object(args.clone())),
        );
        match request.name.as_ref() {
            "echo" => {
                let text = args.get("text").and_then(Value::as_str).unwrap_or("");
                Ok(
                    CallToolResult::success(vec![ContentBlock::text(format!("echo: {text}"))])
                        .into(),
                )
            }
            "add" => {
                let a = args.get("a").and_then(Value::as_f64).unwrap_or(0.0);
                let b = args.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                Ok(CallToolResult::success(vec![ContentBlock::text(format!("{}", a + b))]).into())
            }
            "crash" => std::process::exit(3),
            other => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "no tool {other}"
            ))])
            .into()),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    append(
        "FIXTURE_STARTED",
        &format!("started {}", std::process::id()),
    );
    let service = Fixture.serve(rmcp::transport::stdio()).await.unwrap();
    let _ = service.waiting().await;
}
