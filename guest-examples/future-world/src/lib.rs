//! `future-world`: an echo handler built against `onestep:handler@0.9.0`, a version of the
//! handler package no onestep host serves (its WIT is inline below). `onestep check` names the
//! version and the ones the host serves (used by the host's tests).

wit_bindgen::generate!({
    inline: r#"
        package onestep:handler@0.9.0;

        interface types {
            type json = string;
            record context {
                execution-id: string,
                attempt: u32,
            }
            record handler-error {
                retryable: bool,
                message: string,
                retry-after-ms: option<u64>,
            }
        }

        world handler {
            use types.{context, json, handler-error};
            export handle: func(ctx: context, payload: json) -> result<json, handler-error>;
        }
    "#,
    world: "onestep:handler/handler@0.9.0",
});

struct FutureWorld;

impl Guest for FutureWorld {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        Ok(payload)
    }
}

export!(FutureWorld);
