//! Prints the OpenAPI document (`cargo run -p onestep-api --example openapi`).

fn main() -> Result<(), serde_json::Error> {
    println!(
        "{}",
        serde_json::to_string_pretty(&onestep_api::openapi_document())?
    );
    Ok(())
}
