// The error type must take a lock failure: `E: From<fenced::Error>`.
#[derive(Debug)]
struct MyError;

#[fenced::locked(client = client, name = "x")]
async fn mine(client: &fenced::Client) -> Result<(), MyError> {
    Ok(())
}

fn main() {}
