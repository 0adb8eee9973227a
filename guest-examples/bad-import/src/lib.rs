//! `bad-import`: an echo handler that also imports `onestep:bad-import/missing`, an interface
//! no onestep host provides. It cannot be linked: `onestep check` reports the missing import and
//! `onestep run` refuses to start (used by the host's tests).

wit_bindgen::generate!({
    path: "../../wit",
    inline: r#"
        package onestep:bad-import;

        interface missing {
            ping: func() -> u32;
        }

        world bad-handler {
            include onestep:handler/handler@0.1.0;
            import missing;
        }
    "#,
    world: "onestep:bad-import/bad-handler",
    generate_all,
});

struct BadImport;

impl Guest for BadImport {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        // Using the import keeps it in the component.
        let _ = onestep::bad_import::missing::ping();
        Ok(payload)
    }
}

export!(BadImport);
