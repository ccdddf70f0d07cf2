use fenced::Client;

#[fenced::locked(client = client, name = "x", fair = "yes")]
async fn unknown(client: &Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
