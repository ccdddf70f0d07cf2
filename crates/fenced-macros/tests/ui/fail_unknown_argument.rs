use fenced::Client;

#[fenced::locked(client = client, name = "order:{order_id}")]
async fn typo(client: &Client, id: u64) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
