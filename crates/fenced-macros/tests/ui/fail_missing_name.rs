use fenced::Client;

#[fenced::locked(client = client)]
async fn no_name(client: &Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
