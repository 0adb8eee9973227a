//! `echo`: the smallest onestep handler. Returns its payload unchanged.

wit_bindgen::generate!({ path: "../../wit", world: "handler" });

struct Echo;

impl Guest for Echo {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        Ok(payload)
    }
}

export!(Echo);
